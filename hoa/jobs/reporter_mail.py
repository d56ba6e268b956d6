"""The reporters' outbox sender: each queued email handed to the mail server once, at most.

``send_reporter_emails`` is a scheduled job on any number of hosts: a pass takes the job's
advisory lock, puts back what dead senders left, skips opted-out reporters, claims a batch
(``FOR UPDATE SKIP LOCKED``) and hands each email over, every step conditional on the claim
still being its own. SMTP has no idempotency key: a hand-over with no answer is ``unknown``
and never retried; what certainly sent nothing is retried with backoff. docs/operations.md,
"Reporters' emails", says each step and why.
"""

import contextlib
import logging
import os
import secrets
import smtplib
import socket
from dataclasses import dataclass, field
from datetime import timedelta

from django.core.mail import EmailMessage, get_connection
from django.db import connection, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from hoa.complaints.workflow import opt_out_url, sender
from hoa.jobs.scheduled import check_pass_arguments, pass_lock
from hoa.models import Complaint, ReporterEmail

logger = logging.getLogger(__name__)

SEND_REPORTER_EMAILS_LOCK = "hoa:send-reporter-emails"
DEFAULT_BATCH_SIZE = 50
CLAIM_TIMEOUT = timedelta(minutes=5)
HANDOVER_TIMEOUT = timedelta(minutes=10)
BACKOFF = timedelta(minutes=1)
MAX_BACKOFF = timedelta(hours=6)
MAX_ATTEMPTS = 8

State = ReporterEmail.State


@dataclass
class SendResult:
    acquired: bool
    sent: int = 0
    retrying: int = 0
    failed: int = 0
    unknown: int = 0
    skipped: int = 0
    recovered: dict = field(default_factory=dict)

    @property
    def skipped_pass(self) -> bool:
        return not self.acquired


@dataclass(frozen=True)
class Claim:
    """One email this pass claimed (``claimed_by``: the pass, as the row records it)."""

    id: int
    complaint_id: int
    to_email: str
    subject: str
    body: str
    message_id: str
    attempts: int
    claimed_by: str


def send_reporter_emails(
    *, batch_size: int = DEFAULT_BATCH_SIZE, wait: timedelta | None = None
) -> SendResult:
    """Send the queued reporters' emails, each once, in batches; one pass."""
    check_pass_arguments(batch_size)
    with pass_lock(SEND_REPORTER_EMAILS_LOCK, wait=wait) as acquired:
        if not acquired:
            logger.debug(
                "reporter emails skipped: another sender is running",
                extra={"resource": SEND_REPORTER_EMAILS_LOCK, "outcome": "skipped"},
            )
            return SendResult(acquired=False)
        result = SendResult(acquired=True, recovered=recover_stale_claims())
        result.skipped = skip_opted_out()
        while True:
            claims = claim_batch(batch_size, claimed_by=claimant())
            if claims:
                send_claimed(claims, result)
            if len(claims) < batch_size:
                break
    done = result.sent + result.failed + result.unknown + result.retrying
    logger.log(
        logging.INFO if done else logging.DEBUG,
        "reporter emails: sent=%d retrying=%d failed=%d unknown=%d",
        result.sent,
        result.retrying,
        result.failed,
        result.unknown,
        extra={"resource": SEND_REPORTER_EMAILS_LOCK, "outcome": "done", "sent": result.sent},
    )
    return result


def claimant() -> str:
    """Who claims: this host and process, and this pass (a number drawn per pass)."""
    return f"{socket.gethostname()} pid {os.getpid()} pass {secrets.token_hex(4)}"


def recover_stale_claims(now=None) -> dict:
    """Put back the claims of senders that died; return how many of each."""
    now = now or timezone.now()
    unsent = ReporterEmail.objects.filter(state=State.CLAIMED, claimed_at__lt=now - CLAIM_TIMEOUT)
    back = unsent.update(state=State.PENDING, claimed_by="", claimed_at=None)
    handed = ReporterEmail.objects.filter(
        state=State.HANDING_OVER, handed_over_at__lt=now - HANDOVER_TIMEOUT
    )
    unknown = handed.update(
        state=State.UNKNOWN, last_error="the sender stopped while handing it over"
    )
    return {"requeued": back, "unknown": unknown}


def skip_opted_out() -> int:
    """Queued emails whose reporter opted out, or whose address was erased since."""
    gone = Complaint.objects.exclude(reporter_opted_out_at__isnull=True, reporter_email__gt="")
    return ReporterEmail.objects.filter(
        state=State.PENDING, complaint__in=gone.values("pk")
    ).update(state=State.SKIPPED)


_CLAIM_SQL = """
    UPDATE {emails} SET state = %(claimed)s, claimed_by = %(by)s,
        claimed_at = statement_timestamp(), attempts = attempts + 1
    WHERE id IN (
        SELECT id FROM {emails}
        WHERE state = %(pending)s AND next_attempt_at <= statement_timestamp()
        ORDER BY next_attempt_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id, complaint_id, to_email, subject, body, message_id, attempts
"""


def claim_batch(limit: int, *, claimed_by: str) -> list[Claim]:
    """Claim up to ``limit`` queued emails that are due, oldest first; committed."""
    emails = connection.ops.quote_name(ReporterEmail._meta.db_table)
    params = {"claimed": State.CLAIMED, "pending": State.PENDING, "by": claimed_by, "limit": limit}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL.format(emails=emails), params)
        rows = cursor.fetchall()
    return sorted((Claim(*row, claimed_by=claimed_by) for row in rows), key=lambda c: c.id)


# The complaint's reporter address now, for the statement that records a hand-over.
_reporters_address = Subquery(
    Complaint.objects.filter(pk=OuterRef("complaint_id")).values("reporter_email")[:1]
)


def _move(claim: Claim, *, to: str, from_: tuple[str, ...], wanted=False, **fields) -> bool:
    """Move ``claim`` to state ``to`` if it is still this pass's and in ``from_`` (and,
    with ``wanted``, its reporter still has an address and has not opted out: read in the
    same statement)."""
    rows = ReporterEmail.objects.filter(pk=claim.id, claimed_by=claim.claimed_by, state__in=from_)
    if wanted:
        rows = rows.filter(
            complaint__reporter_opted_out_at__isnull=True, complaint__reporter_email__gt=""
        )
    return bool(rows.update(state=to, **fields))


def send_claimed(claims: list[Claim], result: SendResult) -> None:
    """Hand each claimed email to the mail server once, and record what it answered."""
    complaints = Complaint.objects.select_related("organization").in_bulk(
        {claim.complaint_id for claim in claims}
    )
    mail = get_connection(fail_silently=False)
    try:
        mail.open()
    except (smtplib.SMTPException, OSError) as exc:  # nothing was sent: all of them later
        for claim in claims:
            _not_sent(claim, f"could not connect: {exc}", result, permanent=False)
        return
    try:
        for claim in claims:
            _send_one(mail, claim, complaints[claim.complaint_id], result)
    finally:
        # The messages' answers are recorded; a failed QUIT changes none of them.
        with contextlib.suppress(smtplib.SMTPException, OSError):
            mail.close()


def _send_one(mail, claim: Claim, complaint: Complaint, result: SendResult) -> None:
    try:
        _ready(mail)
    except (smtplib.SMTPException, OSError) as exc:
        _not_sent(claim, f"could not connect: {exc}", result, permanent=False)
        return
    if not _move(
        claim,
        to=State.HANDING_OVER,
        from_=(State.CLAIMED,),
        wanted=True,
        handed_over_at=timezone.now(),
        to_email=_reporters_address,
    ):
        # The reporter opted out (or the address was erased) since the pass began: read
        # again for each email, at its hand-over, never once per pass. Otherwise the claim
        # was taken back (too slow): another pass sends it.
        if _move(claim, to=State.SKIPPED, from_=(State.CLAIMED,)):
            result.skipped += 1
        return
    try:
        message = _message(mail, claim, complaint)
        message.message()  # rendered here: a header Django refuses is refused before sending
    except ValueError as exc:  # BadHeaderError (a line break in a name), a bad address
        _not_sent(claim, f"refused before hand-over: {exc}", result, permanent=True)
        return
    try:
        message.send()
    except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as exc:
        code = _code(exc)
        _not_sent(claim, f"refused: {exc}", result, permanent=code is None or code >= 500)
    except smtplib.SMTPResponseException as exc:  # an answer: the server did not take it
        _not_sent(claim, f"refused: {exc.smtp_code} {exc.smtp_error!r}", result,
                  permanent=exc.smtp_code >= 500)  # fmt: skip
    except (smtplib.SMTPException, OSError) as exc:  # no answer: it may have been taken
        _move(
            claim,
            to=State.UNKNOWN,
            from_=(State.HANDING_OVER,),
            last_error=f"no answer: {exc.__class__.__name__} {exc}"[:500],
        )
        result.unknown += 1
        logger.warning(
            "reporter email perhaps sent: %s", exc, extra={"email": claim.id, "outcome": "unknown"}
        )
    else:
        # A late answer still counts: a hand-over marked unknown by a recovery becomes sent.
        _move(
            claim,
            to=State.SENT,
            from_=(State.HANDING_OVER, State.UNKNOWN),
            sent_at=timezone.now(),
            last_error="",
        )
        result.sent += 1


def _message(mail, claim: Claim, complaint: Complaint) -> EmailMessage:
    """The claimed email, handed over: to the address as the hand-over statement read it
    from the complaint (staff may have corrected it since the change queued the email), not
    the claim's copy."""
    to_email = ReporterEmail.objects.values_list("to_email", flat=True).get(pk=claim.id)
    return EmailMessage(
        subject=claim.subject,
        body=claim.body,
        from_email=sender(complaint),
        to=[to_email],
        headers={
            "Message-ID": claim.message_id,
            "List-Unsubscribe": f"<{opt_out_url(complaint)}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
            "Auto-Submitted": "auto-generated",
        },
        connection=mail,
    )


def _ready(mail) -> None:
    """Make sure the connection still answers (an SMTP ``NOOP``); open it again if not."""
    smtp = getattr(mail, "connection", None)
    if smtp is None:
        return  # not SMTP (console, file, memory): nothing to check
    try:
        smtp.noop()
    except (smtplib.SMTPException, OSError):
        mail.close()
        mail.open()


def _code(exc) -> int | None:
    if isinstance(exc, smtplib.SMTPSenderRefused):
        return exc.smtp_code
    codes = [code for code, _message in exc.recipients.values()]
    return min(codes) if codes else None


def _not_sent(claim: Claim, why: str, result: SendResult, *, permanent: bool) -> None:
    """Nothing was delivered: retry later with backoff, or give up."""
    states = (State.CLAIMED, State.HANDING_OVER)
    if permanent or claim.attempts >= MAX_ATTEMPTS:
        _move(claim, to=State.FAILED, from_=states, last_error=why[:500])
        result.failed += 1
        logger.warning("reporter email not sent: %s", why, extra={"email": claim.id})
        return
    delay = min(BACKOFF * 2 ** (claim.attempts - 1), MAX_BACKOFF)
    _move(
        claim,
        to=State.PENDING,
        from_=states,
        claimed_by="",
        claimed_at=None,
        handed_over_at=None,
        next_attempt_at=timezone.now() + delay,
        last_error=why[:500],
    )
    result.retrying += 1
