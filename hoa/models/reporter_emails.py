"""The reporters' outbox: one email per change a reporter hears of, sent after the commit.

A change that a complaint's reporter is told of (a vendor assigned or replaced; resolved,
closed, reopened) writes its ``ReporterEmail`` in its own transaction, under the
complaint's row lock, so the email exists exactly when the change committed, whatever
happens to the process after the commit. ``send_reporter_emails`` (hoa/jobs/reporter_mail.py)
sends them, each claimed in the database before it is handed to the mail server.
"""

from django.db import connections, models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from hoa.models.complaints import Complaint
from hoa.models.organizations import TenantQuerySet


class ReporterEmailQuerySet(TenantQuerySet):
    tenant_path = "complaint__organization"

    def unsent(self):
        """Waiting to be sent: queued, retrying, or claimed by a sender that has not said."""
        return self.filter(state__in=ReporterEmail.UNSENT)

    def enqueue(self, complaint_id: int, *, kind: str, subject: str, body: str) -> int | None:
        """Queue one email to the complaint's reporter, read from its row in the same
        statement: nothing when no email is recorded or the reporter opted out; return its
        id. Runs in the change's transaction, after the change took the row lock."""
        connection = connections[self.db]
        quote = connection.ops.quote_name
        emails = quote(self.model._meta.db_table)
        complaints = quote(Complaint._meta.db_table)
        sql = f"""
            INSERT INTO {emails} (complaint_id, kind, to_email, subject, body, message_id,
                                  state, attempts, created_at, next_attempt_at, claimed_by,
                                  claimed_at, handed_over_at, sent_at, last_error)
            SELECT id, %(kind)s, reporter_email, %(subject)s, %(body)s,
                   '<reporter-' || id || '-' || gen_random_uuid() || '@' || %(domain)s || '>',
                   %(pending)s, 0, statement_timestamp(), statement_timestamp(), '', NULL, NULL,
                   NULL, ''
            FROM {complaints}
            WHERE id = %(complaint)s AND reporter_email <> '' AND reporter_opted_out_at IS NULL
            RETURNING id
        """  # noqa: S608 - table names from the models; values are parameters
        params = {
            "complaint": complaint_id, "kind": kind, "subject": subject, "body": body,
            "domain": message_id_domain(), "pending": ReporterEmail.State.PENDING,
        }  # fmt: skip
        self._for_write = True
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return row[0] if row is not None else None


def message_id_domain() -> str:
    """The right-hand side of the outbox's Message-IDs: the sender address's domain."""
    from email.utils import parseaddr

    from django.conf import settings

    address = parseaddr(settings.DEFAULT_FROM_EMAIL)[1]
    return address.rpartition("@")[2] or "localhost"


class ReporterEmail(models.Model):
    """One email to a complaint's reporter about one change, and what became of it.

    ``message_id`` is chosen when the email is queued and never changes, so every handing
    over of the same email carries the same Message-ID. The states, and who moves them:

    - ``pending``: queued by the change (or put back by a sender after a failure that
      certainly delivered nothing, ``next_attempt_at`` later);
    - ``claimed``: a sender took it (``claimed_by``, ``claimed_at``), committed before it
      opens its mail connection; a claim whose sender died before handing it over goes
      back to pending;
    - ``handing_over``: committed just before the message is handed to the mail server;
      what it becomes after that is known only from the server's answer;
    - ``sent``: the server accepted it (``sent_at``);
    - ``failed``: refused for good (a 5xx, or too many tries), ``last_error`` says why;
    - ``unknown``: handed over, and the answer never came (the connection broke, or the
      sender died): perhaps delivered, so never handed over again (docs/operations.md).
    - ``skipped``: the reporter opted out (or the address was erased) before it was sent.
    """

    class Kind(models.TextChoices):
        VENDOR_ASSIGNED = "vendor_assigned", _("A vendor is assigned")
        VENDOR_REPLACED = "vendor_replaced", _("Another vendor takes over")
        RESOLVED = "resolved", _("Resolved")
        CLOSED = "closed", _("Closed")
        REOPENED = "reopened", _("Reopened")

    class State(models.TextChoices):
        PENDING = "pending", _("queued")
        CLAIMED = "claimed", _("being sent")
        HANDING_OVER = "handing_over", _("being sent")
        SENT = "sent", _("sent")
        FAILED = "failed", _("not sent")
        UNKNOWN = "unknown", _("perhaps sent")
        SKIPPED = "skipped", _("not sent: the reporter opted out")

    UNSENT = (State.PENDING, State.CLAIMED, State.HANDING_OVER)

    complaint = models.ForeignKey(
        Complaint, on_delete=models.CASCADE, related_name="reporter_emails"
    )
    kind = models.CharField(_("what happened"), max_length=30, choices=Kind.choices)
    # Copied from the complaint when queued; read from it again by the statement that
    # records the hand-over (a corrected address is the one written to).
    to_email = models.EmailField(_("to"))
    subject = models.CharField(_("subject"), max_length=300)
    body = models.TextField(_("body"))
    message_id = models.CharField(_("Message-ID"), max_length=200, unique=True)
    state = models.CharField(_("state"), max_length=20, choices=State.choices)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    created_at = models.DateTimeField(_("queued at"), db_default=Now())
    next_attempt_at = models.DateTimeField(_("next attempt at"), db_default=Now())
    claimed_by = models.CharField(_("claimed by"), max_length=200, blank=True, default="")
    claimed_at = models.DateTimeField(_("claimed at"), null=True, blank=True)
    handed_over_at = models.DateTimeField(_("handed over at"), null=True, blank=True)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)
    last_error = models.CharField(_("last error"), max_length=500, blank=True, default="")

    objects = ReporterEmailQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # The sender's every-minute claim and the metric's oldest unsent row stay index
            # scans however many emails were ever sent.
            models.Index(
                fields=["next_attempt_at", "id"],
                name="reporter_email_unsent_idx",
                condition=Q(state__in=["pending", "claimed", "handing_over"]),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=~Q(state="sent") | Q(sent_at__isnull=False),
                name="reporter_email_sent_has_sent_at",
            ),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} · complaint {self.complaint_id} · {self.state}"
