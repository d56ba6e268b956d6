"""An email to a reporter goes to the reporter's address as it is when it is handed over,
not as it was when the change queued it (issue 44, item 5, class c).

The outbox row copied the complaint's ``reporter_email`` when the change committed, and
the sender wrote to that copy. Staff who corrected a mistyped address (the complaint's
admin page) did not stop the queued emails, each with the complaint's details and its
opt-out link, from going to the stranger at the old one.
"""

import pytest

from hoa.complaints.workflow import change_status
from hoa.jobs.reporter_mail import send_reporter_emails
from hoa.models import Complaint, ReporterEmail
from tests.complaints.test_reporter_emails import complaint, mail  # noqa: F401 - fixtures
from tests.vendors_support import WAIT, Worker

pytestmark = pytest.mark.django_db(transaction=True)

S = Complaint.Status
State = ReporterEmail.State


def test_an_address_corrected_while_emails_wait_is_the_one_they_go_to(
    complaint,  # noqa: F811
    alice,
    mail,  # noqa: F811
):
    change_status(complaint=complaint, seen=S.OPEN, to=S.RESOLVED, note="Dried.", actor=alice)
    change_status(complaint=complaint, seen=S.RESOLVED, to=S.CLOSED, note="", actor=alice)
    mail.hold()
    sender = Worker(send_reporter_emails, name="sender")
    sender.start()
    assert mail.waiting.acquire(timeout=WAIT)  # the batch is claimed; the first is in flight

    Complaint.objects.filter(pk=complaint.pk).update(reporter_email="ana.ruiz@example.org")
    mail.release()
    result = sender.outcome()

    assert result.sent == 2
    # The first was on its way already; the second goes to the corrected address.
    assert mail.recipients == [["ana@example.org"], ["ana.ruiz@example.org"]]
    rows = ReporterEmail.objects.order_by("id").values_list("kind", "to_email", "state")
    assert list(rows) == [
        ("resolved", "ana@example.org", State.SENT),
        ("closed", "ana.ruiz@example.org", State.SENT),
    ]


def test_an_address_corrected_before_the_pass_is_the_one_every_email_goes_to(
    complaint,  # noqa: F811
    alice,
    mail,  # noqa: F811
):
    change_status(complaint=complaint, seen=S.OPEN, to=S.RESOLVED, note="Dried.", actor=alice)
    Complaint.objects.filter(pk=complaint.pk).update(reporter_email="ana.ruiz@example.org")

    assert send_reporter_emails().sent == 1

    assert mail.recipients == [["ana.ruiz@example.org"]]
    assert ReporterEmail.objects.get().to_email == "ana.ruiz@example.org"
