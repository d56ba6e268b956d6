"""Complaints and their timelines (the workflow that changes them is hoa/complaints/)."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connections, models
from django.db.models import Q
from django.db.models.functions import Now
from django.db.transaction import TransactionManagementError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.models.organizations import Organization, Priority, TenantQuerySet, Unit
from locking.models import FencedModel


class ComplaintQuerySet(TenantQuerySet):
    def open(self):
        return self.filter(status__in=Complaint.OPEN_STATUSES)

    def breached(self):
        return self.filter(sla_breached_at__isnull=False)

    def past_sla(self, now=None):
        """Open complaints past their SLA as of ``now``: the due time has passed, or the
        sweep recorded a breach. Computed when asked, whether or not the sweep has run."""
        late = Q(sla_due_at__lt=now or timezone.now()) | Q(sla_breached_at__isnull=False)
        return self.open().filter(late)

    def overdue(self, now=None):
        """Open complaints past their SLA deadline that are not yet marked breached."""
        return self.open().filter(
            sla_breached_at__isnull=True, sla_due_at__lt=now or timezone.now()
        )

    def locked(self, complaint_id: int) -> "Complaint | None":
        """The complaint, read under its row lock (``FOR NO KEY UPDATE``, held until the
        transaction ends): the first statement of every change of a complaint, so that two
        changes run one after the other, each reading what the other committed. The fence
        ``UPDATE`` of a vendor assignment takes the same lock. ``None`` if there is none."""
        if not connections[self.db].in_atomic_block:
            raise TransactionManagementError("a row lock outside a transaction ends at once")
        locking = self.select_for_update(no_key=True, of=("self",))
        return locking.select_related("organization").filter(pk=complaint_id).first()

    def move_recorded(
        self,
        complaint_id: int,
        *,
        from_status: str,
        to_status: str,
        event: dict,
        closed_by_id: int | None = None,
    ) -> "Moved | None":
        """Move the complaint from ``from_status`` to ``to_status`` and record it as a
        ``status_changed`` event, in one statement; return the event's id and time, or
        ``None`` when it did not move (nothing is written then). ``event``: the event's
        ``detail``, ``actor_id`` and ``actor_label``, and its ``at`` if the caller stamped
        the change already (an assignment's time).

        Without ``at`` the change is stamped with the statement's time on the database's
        clock: sent after the caller took the row lock, so later than every change
        committed before it. Moving to ``closed`` records ``closed_at`` (the same time) and
        ``closed_by_id``; any other move clears them. The event row is inserted from the
        UPDATE's output, so it exists exactly when the status moved."""
        connection = connections[self.db]
        quote = connection.ops.quote_name
        complaints = quote(Complaint._meta.db_table)
        events = quote(ComplaintEvent._meta.db_table)
        sql = f"""
            WITH moved AS (
                UPDATE {complaints} SET
                    status = %(to)s,
                    closed_at = CASE WHEN %(closes)s
                        THEN COALESCE(%(at)s::timestamptz, statement_timestamp()) END,
                    closed_by_id = CASE WHEN %(closes)s THEN %(closer)s::bigint END
                WHERE id = %(complaint)s AND status = %(from)s
                RETURNING id, COALESCE(%(at)s::timestamptz, statement_timestamp()) AS at
            )
            INSERT INTO {events} (complaint_id, kind, detail, at, actor_id, actor_label,
                                  from_status, to_status, old_due_at, new_due_at)
            SELECT id, %(kind)s, %(detail)s, at, %(actor)s, %(label)s, %(from)s, %(to)s,
                   NULL, NULL
            FROM moved
            RETURNING id, at
        """  # noqa: S608 - table names from the models; values are parameters
        params = {
            "complaint": complaint_id, "from": from_status, "to": to_status,
            "closes": to_status == Complaint.Status.CLOSED, "closer": closed_by_id,
            "kind": ComplaintEvent.Kind.STATUS_CHANGED, "detail": event.get("detail", ""),
            "at": event.get("at"), "actor": event.get("actor_id"),
            "label": event.get("actor_label", ""),
        }  # fmt: skip
        self._for_write = True
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return Moved(*row) if row is not None else None


@dataclass(frozen=True)
class Moved:
    """A status change ``move_recorded`` made: its event's id, and when (the database's
    clock, after the row lock)."""

    event_id: int
    at: datetime


def _label(choices: type[models.Choices], value) -> str:
    """What Django's ``get_<field>_display`` returns, without the dict of every choice
    (each label translated to be hashed) it builds per call: a list asks it per row."""
    try:
        return str(choices(value).label)
    except ValueError:
        return value


class Complaint(FencedModel):
    class Status(models.TextChoices):
        OPEN = "open", _("Open")
        ASSIGNED = "assigned", _("Assigned")
        IN_PROGRESS = "in_progress", _("In progress")
        RESOLVED = "resolved", _("Resolved")
        CLOSED = "closed", _("Closed")

    Priority = Priority

    # Open for the SLA (its clock runs) until resolved or closed; the sweep, the dashboard
    # and the partial index below use this one tuple.
    OPEN_STATUSES = (Status.OPEN, Status.ASSIGNED, Status.IN_PROGRESS)

    # Deleting a unit or an association never takes complaints (and their timelines) with
    # it; a complaint's unit is one of its association's (a composite foreign key), and
    # neither moves to another association (hoa 0005).
    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="complaints"
    )
    unit = models.ForeignKey(
        Unit, on_delete=models.PROTECT, related_name="complaints", null=True, blank=True
    )
    title = models.CharField(_("title"), max_length=200)
    description = models.TextField(_("description"), blank=True, default="")
    # Who reported it (a resident, a contractor, a passer-by): shown to the association's
    # staff only. The contact details are erased REPORTER_RETENTION_DAYS after the
    # complaint is closed (``forget_reporters``); the name stays with its timeline.
    reporter_name = models.CharField(_("reporter"), max_length=200, blank=True, default="")
    reporter_email = models.EmailField(_("reporter's email"), blank=True, default="")
    reporter_phone = models.CharField(_("reporter's phone"), max_length=30, blank=True, default="")
    # When the reporter asked for no more emails about this complaint (the link in each
    # one: hoa.complaints.workflow); none are queued or sent after it.
    reporter_opted_out_at = models.DateTimeField(
        _("reporter opted out at"), null=True, blank=True, editable=False
    )
    status = models.CharField(
        _("status"), max_length=20, choices=Status.choices, default=Status.OPEN
    )
    priority = models.CharField(
        _("priority"), max_length=10, choices=Priority.choices, default=Priority.NORMAL
    )
    opened_at = models.DateTimeField(_("opened at"), default=timezone.now)
    sla_due_at = models.DateTimeField(_("SLA due at"), null=True, blank=True)
    sla_breached_at = models.DateTimeField(_("SLA breached at"), null=True, blank=True)
    # Who closed it and when (hoa.complaints.change_status); cleared when it is reopened.
    closed_at = models.DateTimeField(_("closed at"), null=True, blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("closed by"),
    )
    # last_fence_token (from FencedModel) fences vendor assignment: the assignment row may
    # not exist yet, the complaint does.

    objects = ComplaintQuerySet.as_manager()

    class Meta:
        ordering = ["-opened_at"]
        indexes = [
            models.Index(
                fields=["sla_due_at"],
                name="complaint_sla_open_idx",
                condition=Q(
                    status__in=["open", "assigned", "in_progress"], sla_breached_at__isnull=True
                ),
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(last_fence_token__gte=0), name="complaint_fence_not_negative"
            )
        ]

    def __str__(self):
        return f"#{self.pk} {self.title}"

    def clean(self):
        """A complaint's unit is one of its association's (the database holds it too)."""
        super().clean()
        if (
            self.unit_id
            and self.organization_id
            and self.unit.organization_id != self.organization_id
        ):
            raise ValidationError(
                {
                    "unit": _("Choose a unit of %(organization)s.")
                    % {"organization": self.organization}
                }
            )

    def save(self, *args, **kwargs):
        if self.sla_due_at is None and self.organization_id:
            self.sla_due_at = self.opened_at + timedelta(
                hours=self.organization.sla_hours_for(self.priority)
            )
        super().save(*args, **kwargs)

    def get_status_display(self) -> str:
        return _label(self.Status, self.status)

    def get_priority_display(self) -> str:
        return _label(self.Priority, self.priority)

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN_STATUSES

    @property
    def is_breached(self) -> bool:
        return self.sla_breached_at is not None

    def overdue_by(self, now=None) -> timedelta | None:
        """How long past its SLA due time this open complaint is, at ``now``; ``None`` when
        it is not (closed or resolved complaints have no clock running)."""
        if not self.is_open or self.sla_due_at is None:
            return None
        late = (now or timezone.now()) - self.sla_due_at
        return late if late > timedelta(0) else None

    def is_past_sla(self, now=None) -> bool:
        """Open and overdue now, or with a breach the sweep recorded (``past_sla``)."""
        return self.is_open and (self.is_breached or self.overdue_by(now) is not None)


class ComplaintEventQuerySet(TenantQuerySet):
    tenant_path = "complaint__organization"


class ComplaintEvent(models.Model):
    """Something that happened to a complaint: an SLA breach, a status change, a note, an
    SLA change. Written by the sweep and by ``hoa.complaints``; never edited.

    ``detail`` is the staff member's note (a status change, a note) or reason (an SLA
    change), or what the sweep recorded.
    """

    class Kind(models.TextChoices):
        OPENED = "opened", _("Opened")
        SLA_BREACHED = "sla_breached", _("SLA breached")
        NOTE = "note", _("Note")
        STATUS_CHANGED = "status_changed", _("Status changed")
        SLA_CHANGED = "sla_changed", _("SLA changed")

    complaint = models.ForeignKey(Complaint, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=30, choices=Kind.choices)
    detail = models.TextField(blank=True, default="")
    # Stamped by the database (``statement_timestamp()``) when the row is inserted: every
    # change inserts its event after taking the complaint's row lock, so one clock orders
    # the timeline as the changes committed (a time taken in Python before the lock, or on
    # another host, need not).
    at = models.DateTimeField(db_default=Now())
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    # Who, as recorded when it happened (the user may be renamed or deleted later).
    actor_label = models.CharField(max_length=200, blank=True, default="")
    from_status = models.CharField(max_length=20, choices=Complaint.Status.choices, blank=True)
    to_status = models.CharField(max_length=20, choices=Complaint.Status.choices, blank=True)
    old_due_at = models.DateTimeField(null=True, blank=True)
    new_due_at = models.DateTimeField(null=True, blank=True)

    objects = ComplaintEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            # An SLA breach is recorded once per complaint, whatever the sweeps do.
            models.UniqueConstraint(
                fields=["complaint"],
                condition=Q(kind="sla_breached"),
                name="one_sla_breach_event_per_complaint",
            ),
            models.CheckConstraint(
                condition=~Q(kind="status_changed") | (~Q(from_status="") & ~Q(to_status="")),
                name="status_change_has_from_and_to",
            ),
            models.CheckConstraint(
                condition=~Q(kind="sla_changed") | Q(new_due_at__isnull=False),
                name="sla_change_has_new_due_time",
            ),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} · {self.complaint_id}"
