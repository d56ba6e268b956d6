"""An opt-out (or an erased address) is read again for each email, at its hand-over, not
once per pass (issue 44, item 5, class b).

A pass skipped the opted-out reporters' emails once, then claimed a batch and handed its
emails over one by one; ``opt_out`` skips only queued (pending) emails. A reporter who
opted out while the pass was sending (the link in the first email of the batch, say) still
got the batch's later emails, though "none are queued or sent after it" is the promise.
"""

import pytest

from hoa.complaints import workflow
from hoa.complaints.workflow import change_status
from hoa.jobs.reporter_mail import send_reporter_emails
from hoa.models import Complaint, ReporterEmail
from tests.complaints.test_reporter_emails import complaint, mail  # noqa: F401 - fixtures
from tests.harness.smtp import message_id
from tests.vendors_support import WAIT, Worker

pytestmark = pytest.mark.django_db(transaction=True)

S = Complaint.Status
State = ReporterEmail.State


def _held_inside_the_first_hand_over(mail):  # noqa: F811
    mail.hold()
    sender = Worker(send_reporter_emails, name="sender")
    sender.start()
    assert mail.waiting.acquire(timeout=WAIT)  # the batch is claimed; the first is in flight
    return sender


def test_an_opt_out_during_a_pass_stops_the_emails_it_has_not_handed_over_yet(
    complaint,  # noqa: F811
    alice,
    mail,  # noqa: F811
):
    change_status(complaint=complaint, seen=S.OPEN, to=S.RESOLVED, note="Dried.", actor=alice)
    change_status(complaint=complaint, seen=S.RESOLVED, to=S.CLOSED, note="", actor=alice)
    resolved, _closed = ReporterEmail.objects.order_by("id")
    sender = _held_inside_the_first_hand_over(mail)

    workflow.opt_out(complaint)  # what the first email's link does
    mail.release()
    result = sender.outcome()

    assert [message_id(m) for m in mail.received] == [resolved.message_id]
    assert (result.sent, result.skipped) == (1, 1)
    states = dict(ReporterEmail.objects.values_list("kind", "state"))
    assert states == {"resolved": State.SENT, "closed": State.SKIPPED}


def test_an_address_erased_during_a_pass_is_not_written_to(
    complaint,  # noqa: F811
    alice,
    mail,  # noqa: F811
):
    change_status(complaint=complaint, seen=S.OPEN, to=S.RESOLVED, note="Dried.", actor=alice)
    change_status(complaint=complaint, seen=S.RESOLVED, to=S.CLOSED, note="", actor=alice)
    sender = _held_inside_the_first_hand_over(mail)

    Complaint.objects.filter(pk=complaint.pk).update(reporter_email="")  # erased (staff, GDPR)
    mail.release()
    sender.outcome()

    assert len(mail.received) == 1
    states = dict(ReporterEmail.objects.values_list("kind", "state"))
    assert states == {"resolved": State.SENT, "closed": State.SKIPPED}
