"""A dispatch taken back is never named again by a later, real dispatch (issue 44, item 5,
class d: a key that assumes it is used for one business fact only).

The dispatch key names the change: ``vendor-assignment:<complaint>:<vendor>:replacing:<the
complaint's latest assignment>``. An attempt whose complaint was closed while its vendor
was being told is refused at its commit and sends that vendor the cancellation, under the
dispatch's key; nothing is written, so the complaint's latest assignment stays what it
was. Reopened, the same vendor sent again made the same key: the dispatch service, which
performs a key once (and has just cancelled it), would answer with the stored answer of
the cancelled dispatch, and the vendor would never hear of the real one. The key now also
names the complaint's latest close, which a close between the two attempts changes.
"""

import pytest

from hoa.complaints.workflow import change_status
from hoa.models import Complaint
from tests.races.test_complaints_close_races import (  # noqa: F401 - fixtures
    STARTS,
    assigning,
    bob,
    closing,
    complaint,
    starting,
)
from tests.vendors_support import cancellations, dispatch_of, dispatches
from vendors.exceptions import ClosedSinceViewed
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)

S = Complaint.Status


@pytest.mark.parametrize("status", STARTS)
def test_a_vendor_sent_again_after_a_close_took_back_its_dispatch_gets_a_new_key(
    complaint,  # noqa: F811
    pipe,
    green,
    alice,
    bob,  # noqa: F811
    dispatch,
    status,
):
    before = starting(complaint, status, vendor=pipe, actor=alice)
    gate = dispatch.hold(dispatch_of(green))
    attempt = assigning(complaint, green, alice, before)
    attempt.start()
    gate.wait_arrived(1)  # looked (not closed), and inside its dispatch call
    close = closing(complaint, status, bob)
    close.start()
    assert close.outcome().to == S.CLOSED  # committed while the attempt waits at the gate
    gate.release()
    assert isinstance(attempt.outcome(), ClosedSinceViewed)
    [taken_back] = [c for c in cancellations(dispatch) if c.json["vendor"]["id"] == green.pk]
    assert taken_back.json["reason"] == "refused-at-commit"

    complaint.refresh_from_db()
    change_status(complaint=complaint, seen=S.CLOSED, to=S.OPEN, note="Back.", actor=alice)
    complaint.refresh_from_db()
    sent = assign_vendor(complaint=complaint, vendor=green, actor=alice)

    assert sent.outcome == "committed" and sent.dispatched
    new_dispatch = dispatches(dispatch)[-1]
    assert new_dispatch.json["vendor"]["id"] == green.pk
    assert new_dispatch.idempotency_key != taken_back.idempotency_key

    # Closing again takes back the dispatch that made this assignment: its key, its token.
    complaint.refresh_from_db()
    change_status(complaint=complaint, seen=S.ASSIGNED, to=S.CLOSED, note="Done.", actor=bob)
    last = cancellations(dispatch)[-1]
    assert (last.json["reason"], last.token) == ("complaint-closed", sent.token)
    assert last.idempotency_key == new_dispatch.idempotency_key
