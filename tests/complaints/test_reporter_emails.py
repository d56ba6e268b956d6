"""Reporters hear back (issue 37, item 7): the outbox, its sender and the opt-out, against
the real PostgreSQL and a real SMTP server (aiosmtpd, tests/harness/smtp.py).

A change a reporter is told of (a vendor assigned or replaced; resolved, closed, reopened)
writes its email to the outbox in its own transaction; ``send_reporter_emails`` claims
each in the database and hands it to the mail server once, with its own Message-ID and an
opt-out link scoped to the complaint. Two senders at once send each email once; a
temporary refusal is retried with the same Message-ID; a hand-over that got no answer is
never handed over again.
"""

import re
import signal
from datetime import timedelta
from email.header import decode_header, make_header
from io import StringIO
from urllib.parse import urlsplit

import pytest
from django.core import signing
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from hoa.complaints import workflow
from hoa.complaints.exceptions import StatusChanged
from hoa.complaints.workflow import Reporter, change_status, open_complaint
from hoa.jobs.reporter_mail import SendResult, claim_batch, send_claimed, send_reporter_emails
from hoa.models import Complaint, ReporterEmail
from hoa.settings import email_settings
from tests.harness.processes import run_manage, start_manage, stop_process
from tests.harness.smtp import MailServer, message_id
from tests.harness.waiting import wait_until
from tests.vendors_support import WAIT, Worker
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)

S = Complaint.Status
State = ReporterEmail.State
SENDER = "HOA office <hoa@maple.example>"


@pytest.fixture
def mail(settings):
    server = MailServer().start()
    for name, value in email_settings(server.url).items():
        setattr(settings, name, value)
    settings.DEFAULT_FROM_EMAIL = SENDER
    settings.SITE_URL = "https://hoa.example.org"
    try:
        yield server.mailbox
    finally:
        server.stop()


@pytest.fixture
def complaint(maple, alice):
    maple.time_zone = "America/New_York"
    maple.save()
    return open_complaint(
        organization=maple,
        unit=maple.units.first(),
        title="Water in the basement",
        description="It comes in under the door.",
        priority="high",
        reporter=Reporter("Ana Ruiz", "ana@example.org", ""),
        actor=alice,
    )


def close(complaint, actor, seen=S.OPEN):
    return change_status(
        complaint=complaint, seen=seen, to=S.CLOSED, note="A duplicate.", actor=actor
    )


def subject(message) -> str:
    return str(make_header(decode_header(message["Subject"])))


def emails(complaint) -> list[tuple[str, str]]:
    return list(
        ReporterEmail.objects.filter(complaint=complaint)
        .order_by("id")
        .values_list("kind", "state")
    )


# --- the outbox: one row per change, in the change's transaction ----------------------------


def test_each_change_a_reporter_is_told_of_queues_one_email_and_no_other_does(
    complaint, pipe, green, alice, dispatch
):
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    complaint.refresh_from_db()
    assign_vendor(complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=first)
    change_status(complaint=complaint, seen=S.ASSIGNED, to=S.IN_PROGRESS, note="", actor=alice)
    change_status(
        complaint=complaint, seen=S.IN_PROGRESS, to=S.RESOLVED, note="Fixed.", actor=alice
    )
    change_status(complaint=complaint, seen=S.RESOLVED, to=S.OPEN, note="Back.", actor=alice)
    close(complaint, alice, seen=S.ASSIGNED)

    assert emails(complaint) == [
        ("vendor_assigned", "pending"),
        ("vendor_replaced", "pending"),
        ("resolved", "pending"),
        ("reopened", "pending"),
        ("closed", "pending"),
    ]
    rows = list(ReporterEmail.objects.filter(complaint=complaint).order_by("id"))
    assert {row.to_email for row in rows} == {"ana@example.org"}
    assert len({row.message_id for row in rows}) == 5
    assert "Evergreen takes it over from Pipe Pros on" in rows[1].body
    # In the association's name and time zone.
    assert rows[0].subject == f"Complaint #{complaint.pk}: a vendor is on it · Maple Court"
    assert re.search(
        r"Pipe Pros was sent to deal with it on \d{4}-\d\d-\d\d \d\d:\d\d E[SD]T\.", rows[0].body
    )
    assert rows[0].body.startswith(
        "Ana Ruiz,\n\nThis is about your complaint “Water in the basement”"
    )


def test_no_email_without_an_address_after_an_opt_out_or_for_a_refused_change(
    complaint, maple, alice
):
    quiet = Complaint.objects.create(organization=maple, title="Bins", reporter_name="Bo")
    close(quiet, alice)
    workflow.opt_out(complaint)
    change_status(complaint=complaint, seen=S.OPEN, to=S.RESOLVED, note="Done.", actor=alice)
    with pytest.raises(StatusChanged):
        close(complaint, alice, seen=S.OPEN)  # it is resolved now: refused, nothing written

    assert ReporterEmail.objects.count() == 0


# --- the sender --------------------------------------------------------------------------------


def test_the_sender_hands_each_email_to_the_mail_server_once_as_the_association(
    complaint, alice, mail
):
    change_status(complaint=complaint, seen=S.OPEN, to=S.RESOLVED, note="Dried.", actor=alice)
    [row] = ReporterEmail.objects.all()  # committed with the change: no sender needed yet

    result = send_reporter_emails()

    assert (result.sent, result.unknown, result.failed) == (1, 0, 0)
    [message] = mail.messages
    assert mail.recipients == [["ana@example.org"]]
    assert message["From"] == "Maple Court <hoa@maple.example>"
    assert message_id(message) == row.message_id
    assert subject(message) == f"Complaint #{complaint.pk} is resolved · Maple Court"
    body = message.get_payload(decode=True).decode()
    assert "What happened: it was marked resolved on" in body
    assert "What comes next: nothing, if the problem is gone." in body
    link = re.search(r"https://hoa.example.org/reporters/opt-out/[^\s]+/", body).group()
    assert " ".join(message["List-Unsubscribe"].split()) == f"<{link}>"  # unfolded
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    row.refresh_from_db()
    assert (row.state, row.attempts) == (State.SENT, 1) and row.sent_at is not None
    assert send_reporter_emails().sent == 0 and len(mail.received) == 1  # once


def test_a_message_id_longer_than_a_line_arrives_folded_and_reads_as_queued(
    complaint, alice, mail, settings
):
    """Django folds a header past 78 characters. A short domain gets there from a
    five-digit complaint pk (a busy database, or CI's); a long one on any pk."""
    settings.DEFAULT_FROM_EMAIL = "HOA office <hoa@maple-court-homeowners-association.example>"
    change_status(complaint=complaint, seen=S.OPEN, to=S.RESOLVED, note="Dried.", actor=alice)
    [row] = ReporterEmail.objects.all()

    assert send_reporter_emails().sent == 1

    [message] = mail.messages
    assert len(f"Message-ID: {row.message_id}") > 78
    assert message_id(message) == row.message_id


def test_two_senders_at_once_hand_each_email_over_once(complaint, maple, alice, mail):
    """Two hosts whose advisory lock did not keep them apart: the claim in the database
    does. Sender A claims both emails and is held inside its first hand-over; sender B,
    started then, finds nothing to claim."""
    other = open_complaint(
        organization=maple, unit=None, title="Lift", description="", priority="low",
        reporter=Reporter("Li", "li@example.org", ""), actor=alice,
    )  # fmt: skip
    close(complaint, alice)
    close(other, alice)
    mail.hold()
    a = Worker(lambda: _one_sender("a"), name="a")
    a.start()
    assert mail.waiting.acquire(timeout=WAIT)  # A is handing its first email over
    b = _one_sender("b")
    mail.release()
    a_result = a.outcome()

    assert (a_result.sent, b.sent) == (2, 0)
    ids = [message_id(message) for message in mail.received]
    assert sorted(ids) == sorted(ReporterEmail.objects.values_list("message_id", flat=True))
    assert set(ReporterEmail.objects.values_list("state", flat=True)) == {State.SENT}


def _one_sender(name: str) -> SendResult:
    result = SendResult(acquired=True)
    claims = claim_batch(10, claimed_by=f"host-{name}")
    if claims:
        send_claimed(claims, result)
    return result


def test_two_passes_at_once_take_turns_on_the_advisory_lock(complaint, alice, mail):
    close(complaint, alice)
    mail.hold()
    first = Worker(send_reporter_emails, name="first")
    first.start()
    assert mail.waiting.acquire(timeout=WAIT)
    second = send_reporter_emails()
    mail.release()

    assert second.skipped_pass
    assert first.outcome().sent == 1 and len(mail.received) == 1


def test_every_sends_at_each_pass_until_sigterm_and_prints_only_the_passes_that_sent(
    complaint, alice, mail, subprocess_env, settings
):
    """``make run``'s loop: ``--every SECONDS`` runs a pass every SECONDS, says nothing when
    there was nothing to send, and stops on SIGTERM with exit 0."""
    env = {
        **subprocess_env,
        "EMAIL_URL": f"smtp://{settings.EMAIL_HOST}:{settings.EMAIL_PORT}",
        "DEFAULT_FROM_EMAIL": SENDER,
    }
    sender = start_manage("send_reporter_emails", "--every", "0.1", env=env)
    try:
        close(complaint, alice)
        wait_until(lambda: len(mail.messages) == 1, what="the first email", timeout=WAIT)
        change_status(complaint=complaint, seen=S.CLOSED, to=S.OPEN, note="Back.", actor=alice)
        wait_until(lambda: len(mail.messages) == 2, what="the second email", timeout=WAIT)
        sender.send_signal(signal.SIGTERM)
        out, err = sender.communicate(timeout=WAIT)
    finally:
        stop_process(sender)

    assert (sender.returncode, err) == (0, "")
    sent = "Reporter emails: 1 sent, 0 to retry, 0 failed, 0 perhaps sent, 0 skipped (opted out)."
    assert out.splitlines() == [sent, sent]
    assert [message_id(message) for message in mail.messages] == list(
        complaint.reporter_emails.order_by("pk").values_list("message_id", flat=True)
    )


@pytest.mark.parametrize("every", ["0", "-1", "nan", "soon", "3601"])
def test_every_refuses_what_is_not_a_number_of_seconds_with_one_line(every, subprocess_env):
    done = run_manage("send_reporter_emails", "--every", every, env=subprocess_env)

    assert done.returncode == 1
    assert done.stderr.startswith("CommandError: --every must be a number of seconds")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_temporary_refusal_is_retried_later_with_the_same_message_id(complaint, alice, mail):
    close(complaint, alice)
    mail.answer = "451 4.3.0 Try again later"

    assert send_reporter_emails().retrying == 1
    [row] = ReporterEmail.objects.all()
    assert (row.state, row.attempts) == (State.PENDING, 1)
    assert row.next_attempt_at > timezone.now() + timedelta(seconds=50)
    assert send_reporter_emails().retrying == 0  # not due yet
    mail.answer = "250 OK"
    ReporterEmail.objects.update(next_attempt_at=timezone.now())

    assert send_reporter_emails().sent == 1
    assert [message_id(m) for m in mail.received] == [row.message_id] * 2
    assert len(mail.messages) == 1


def test_a_permanent_refusal_is_not_retried(complaint, alice, mail):
    close(complaint, alice)
    mail.answer = "550 5.1.1 No such user"

    assert send_reporter_emails().failed == 1
    row = ReporterEmail.objects.get()
    assert row.state == State.FAILED and "550" in row.last_error
    ReporterEmail.objects.update(next_attempt_at=timezone.now())
    send_reporter_emails()
    assert len(mail.received) == 1


def test_an_email_django_refuses_to_build_is_not_sent_and_the_batch_goes_on(
    complaint, maple, oak, alice, mallory, mail
):
    """An association's name with a line break (saved before names were checked) makes a
    From header Django refuses: that email is "not sent" before anything is handed over,
    never "perhaps sent", and the other association's email still goes."""
    other = open_complaint(
        organization=oak,
        unit=oak.units.first(),
        title="Broken gate",
        description="It does not close.",
        priority="normal",
        reporter=Reporter("Ben Ito", "ben@example.org", ""),
        actor=mallory,
    )
    type(maple).objects.filter(pk=maple.pk).update(name="Maple\nCourt")
    close(complaint, alice)
    close(other, mallory)

    result = send_reporter_emails()

    assert (result.sent, result.failed, result.unknown) == (1, 1, 0)
    broken = ReporterEmail.objects.get(complaint=complaint)
    assert broken.state == State.FAILED
    assert broken.last_error.startswith("refused before hand-over")
    assert ReporterEmail.objects.get(complaint=other).state == State.SENT
    assert [m["To"] for m in mail.received] == ["ben@example.org"]


def test_a_hand_over_that_got_no_answer_is_never_handed_over_again(complaint, alice, mail):
    close(complaint, alice)
    mail.drop = True

    assert send_reporter_emails().unknown == 1
    row = ReporterEmail.objects.get()
    assert row.state == State.UNKNOWN and row.last_error.startswith("no answer")
    mail.drop = False
    ReporterEmail.objects.update(next_attempt_at=timezone.now())
    send_reporter_emails()
    assert len(mail.received) == 1  # perhaps delivered: not again


def test_what_dead_senders_left_is_put_back_or_marked_perhaps_sent(complaint, maple, alice, mail):
    close(complaint, alice)
    long_ago = timezone.now() - timedelta(hours=1)
    ReporterEmail.objects.update(state=State.CLAIMED, claimed_by="dead", claimed_at=long_ago)
    other = open_complaint(
        organization=maple, unit=None, title="Lift", description="", priority="low",
        reporter=Reporter("Li", "li@example.org", ""), actor=alice,
    )  # fmt: skip
    close(other, alice)
    ReporterEmail.objects.filter(complaint=other).update(
        state=State.HANDING_OVER, claimed_by="dead", claimed_at=long_ago, handed_over_at=long_ago
    )

    result = send_reporter_emails()

    assert result.recovered == {"requeued": 1, "unknown": 1}
    assert emails(complaint) == [("closed", State.SENT)]  # never handed over: sent now
    assert emails(other) == [("closed", State.UNKNOWN)]  # perhaps handed over: not again
    assert len(mail.received) == 1


# --- the opt-out -------------------------------------------------------------------------------


def test_the_opt_out_link_needs_no_login_and_stops_that_complaints_emails_only(
    complaint, maple, alice, mail
):
    other = open_complaint(
        organization=maple, unit=None, title="Lift", description="", priority="low",
        reporter=Reporter("Ana Ruiz", "ana@example.org", ""), actor=alice,
    )  # fmt: skip
    close(complaint, alice)
    close(other, alice)
    path = urlsplit(workflow.opt_out_url(complaint)).path
    anonymous = Client(enforce_csrf_checks=True)

    page = anonymous.get(path)
    assert page.status_code == 200
    assert "Stop these emails" in page.content.decode()
    assert Complaint.objects.get(pk=complaint.pk).reporter_opted_out_at is None  # a GET: nothing

    # RFC 8058's one-click POST, as a mail provider sends it: no page, no CSRF token.
    done = anonymous.post(path, {"List-Unsubscribe": "One-Click"})
    assert done.status_code == 200
    assert "You will get no more emails from Maple Court about complaint" in done.content.decode()
    assert Complaint.objects.get(pk=complaint.pk).reporter_opted_out_at is not None
    assert emails(complaint) == [("closed", State.SKIPPED)]
    change_status(complaint=complaint, seen=S.CLOSED, to=S.OPEN, note="Back.", actor=alice)
    assert emails(complaint) == [("closed", State.SKIPPED)]  # none queued after it

    send_reporter_emails()
    assert [subject(m) for m in mail.messages] == [f"Complaint #{other.pk} is closed · Maple Court"]
    assert anonymous.post(path).status_code == 200  # saying it twice changes nothing


def test_the_opt_out_link_is_the_same_whenever_it_is_made(complaint, monkeypatch):
    """The body's link is written when the change commits, the List-Unsubscribe header's
    when the email is sent: a timestamped token gave one email two links whenever a
    second passed between them (seen once in a full run)."""
    made_at_commit = workflow.opt_out_url(complaint)
    monkeypatch.setattr(signing.TimestampSigner, "timestamp", lambda self: "later")
    assert workflow.opt_out_url(complaint) == made_at_commit
    assert workflow.complaint_of(made_at_commit.rstrip("/").rsplit("/", 1)[1]) == complaint


@pytest.mark.parametrize("token", ["nope", "x" * 300, "eyJjb21wbGFpbnQiOjF9:forged:sig"])
def test_a_token_that_is_not_ours_is_400_and_changes_nothing(complaint, token):
    response = Client().post(reverse("hoa:reporter-opt-out", args=[token]))
    assert response.status_code == 400
    assert "This link does not work" in response.content.decode()
    assert Complaint.objects.get(pk=complaint.pk).reporter_opted_out_at is None


# --- what staff see, and forgetting --------------------------------------------------------------


def test_the_timeline_shows_what_was_sent_and_when(complaint, alice, mail):
    close(complaint, alice)
    send_reporter_emails()
    client = Client()
    client.force_login(alice)

    html = client.get(reverse("complaints:complaint", args=["maple-court", complaint.pk]))
    text = re.sub(r"<[^>]+>", "", html.content.decode())  # the words, not the markup

    assert "Email to the reporter (ana@example.org)" in text
    assert re.search(r"sent \d{4}-\d\d-\d\d \d\d:\d\d E[SD]T", text)


def test_forget_reporters_erases_the_emails_of_complaints_closed_past_the_retention(
    complaint, maple, alice, settings
):
    close(complaint, alice)
    recent = open_complaint(
        organization=maple, unit=None, title="Lift", description="", priority="low",
        reporter=Reporter("Li", "li@example.org", ""), actor=alice,
    )  # fmt: skip
    close(recent, alice)
    past = timezone.now() - timedelta(days=settings.REPORTER_RETENTION_DAYS + 1)
    Complaint.objects.filter(pk=complaint.pk).update(closed_at=past)
    out = StringIO()

    call_command("forget_reporters", "-v", "1", stdout=out)

    assert "Erased the contact of 1 reporter" in out.getvalue()
    assert out.getvalue().strip().endswith("and 1 email to them.")
    assert emails(complaint) == [] and emails(recent) == [("closed", "pending")]


def test_the_outbox_metric_says_how_long_the_oldest_unsent_email_has_waited(
    complaint, alice, client
):
    close(complaint, alice)
    ReporterEmail.objects.update(created_at=timezone.now() - timedelta(hours=2))

    body = client.get("/metrics").content.decode()

    waited = float(re.search(r"^hoa_reporter_outbox_oldest_unsent_seconds (\S+)$", body, re.M)[1])
    assert 7190 < waited < 7300
    assert 'hoa_reporter_outbox_emails{state="pending"} 1.0' in body
