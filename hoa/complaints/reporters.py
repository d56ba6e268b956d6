"""Reporters hear back: the email a change of their complaint queues, and their opt-out.

``tell_reporter`` writes the email to the outbox (``ReporterEmail``) in the change's own
transaction, after its row lock; ``send_reporter_emails`` (hoa/jobs/reporter_mail.py) sends
it. The opt-out link is the complaint's id signed (``django.core.signing``, its own salt),
good for that complaint only. docs/operations.md, "Reporters' emails", has the rest.
"""

from datetime import datetime
from email.utils import formataddr, parseaddr

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation

from hoa.models import Complaint, ReporterEmail

__all__ = ["Kind", "change_of_status", "opt_out_token", "opt_out_url", "sender", "tell_reporter"]

Kind = ReporterEmail.Kind
Status = Complaint.Status
OPT_OUT_SALT = "hoa.reporter-opt-out"


def change_of_status(seen: str, lands_on: str) -> str | None:
    """The kind of email a status change sends its reporter, or ``None`` (most don't)."""
    if lands_on == Status.RESOLVED:
        return Kind.RESOLVED
    if lands_on == Status.CLOSED:
        return Kind.CLOSED
    if seen in (Status.RESOLVED, Status.CLOSED):  # reopened, or work on it starts again
        return Kind.REOPENED
    return None


def tell_reporter(
    complaint: Complaint,
    kind: str,
    *,
    at: datetime,
    vendor: str = "",
    replaced: str = "",
) -> int | None:
    """Queue the email that tells ``complaint``'s reporter of this change (``at``: its time;
    ``vendor``, ``replaced``: who was sent, and whom they take over from); return its id, or
    ``None`` when there is nobody to tell. In the change's transaction, after its row lock.

    ``complaint`` is the caller's copy: with no reporter email on it, nothing is written
    (no statement); otherwise the outbox row takes the address from the complaint's row,
    and none is written if the reporter opted out."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("tell_reporter runs inside the change's transaction")
    if not complaint.reporter_email:
        return None
    subject, body = render(complaint, kind, at=at, vendor=vendor, replaced=replaced)
    return ReporterEmail.objects.enqueue(complaint.pk, kind=kind, subject=subject, body=body)


def render(complaint: Complaint, kind: str, *, at: datetime, vendor="", replaced="") -> tuple:
    """The subject and the plain-text body, in the association's time zone."""
    organization = complaint.organization
    context = {
        "complaint": complaint,
        "organization": organization,
        "kind": kind,
        "at": at,
        "vendor": vendor,
        "replaced": replaced,
        "opt_out_url": opt_out_url(complaint),
    }
    with translation.override(settings.LANGUAGE_CODE), timezone.override(organization.zone):
        subject = render_to_string("hoa/reporters/email_subject.txt", context)
        body = render_to_string("hoa/reporters/email_body.txt", context)
    return " ".join(subject.split())[:300], body.strip() + "\n"


def sender(complaint: Complaint) -> str:
    """``From``: the association's name, at the deployment's sending address."""
    return formataddr((complaint.organization.name, parseaddr(settings.DEFAULT_FROM_EMAIL)[1]))


def opt_out_token(complaint: Complaint) -> str:
    """The complaint's opt-out token: signed, and the same whenever it is made (no
    timestamp), as the body's link is written when the change commits and the
    ``List-Unsubscribe`` header's when the email is sent: one email, one link."""
    return _signer().sign_object({"complaint": complaint.pk}, compress=True)


def _signer() -> signing.Signer:
    return signing.Signer(salt=OPT_OUT_SALT)


def opt_out_url(complaint: Complaint) -> str:
    path = reverse("hoa:reporter-opt-out", args=[opt_out_token(complaint)])
    return f"{settings.SITE_URL}{path}"


def complaint_of(token: str) -> Complaint | None:
    """The complaint an opt-out token names, or ``None`` when it is not one of ours."""
    try:
        value = _signer().unsign_object(token)
    except (signing.BadSignature, ValueError):  # not ours, or ours but not an object
        return None
    complaint_id = value.get("complaint") if isinstance(value, dict) else None
    if not isinstance(complaint_id, int):
        return None
    return Complaint.objects.select_related("organization").filter(pk=complaint_id).first()


def opt_out(complaint: Complaint) -> int:
    """Stop the emails about ``complaint``: record when, and skip those still queued;
    return how many queued ones were skipped. Saying it twice changes nothing."""
    with transaction.atomic():
        Complaint.objects.filter(pk=complaint.pk, reporter_opted_out_at__isnull=True).update(
            reporter_opted_out_at=timezone.now()
        )
        return ReporterEmail.objects.filter(
            complaint=complaint, state=ReporterEmail.State.PENDING
        ).update(state=ReporterEmail.State.SKIPPED)
