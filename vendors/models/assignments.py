"""Assignments of vendors to complaints: at most one active per complaint."""

from collections.abc import Iterable

from django.conf import settings
from django.db import connections, models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.models import Complaint
from hoa.tenancy import TenantQuerySet
from vendors.models.contracts import Vendor


class VendorAssignmentQuerySet(TenantQuerySet):
    tenant_path = "complaint__organization"

    def active(self):
        return self.filter(active=True)

    def replace_if_active(
        self, seen, new: "VendorAssignment", *, statuses: Iterable[str]
    ) -> str | None:
        """Deactivate ``seen`` and insert ``new`` (unsaved; its pk and ``assigned_at`` are
        set) in one statement, if ``seen`` is still its complaint's active assignment and
        not ``new``'s vendor's, and the complaint's status is one of ``statuses`` (those the
        rule table lets a reassignment run in); return the complaint's status, read in the
        same statement, or ``None`` when nothing matched (then nothing was written).

        A reassignment's compare-and-swap on what the caller saw. The INSERT reads its row
        from the UPDATE's output, so the old row is deactivated before the new one meets
        the one-active index (which is not deferrable). It runs after the fence UPDATE took
        the complaint's row lock: the status it reads is the latest committed one and
        cannot change before the commit, and its time (``statement_timestamp()``, the
        assignment's ``assigned_at`` and the old one's ``deactivated_at``) is after every
        change of the complaint committed before it.
        """
        table = connections[self.db].ops.quote_name(self.model._meta.db_table)
        complaints = connections[self.db].ops.quote_name(Complaint._meta.db_table)
        sql = f"""
            WITH seen AS (
                UPDATE {table} SET active = false, deactivated_at = statement_timestamp(),
                    ended_because = %(replaced)s
                WHERE id = %(seen)s AND complaint_id = %(complaint)s AND active
                    AND vendor_id <> %(vendor)s
                    AND EXISTS (SELECT 1 FROM {complaints}
                                WHERE id = %(complaint)s AND status = ANY(%(statuses)s))
                RETURNING complaint_id
            )
            INSERT INTO {table} (complaint_id, vendor_id, active, fence_token, assigned_at,
                                 assigned_by_id, actor_label, deactivated_at, ended_because)
            SELECT complaint_id, %(vendor)s, true, %(token)s, statement_timestamp(), %(by)s,
                   %(label)s, NULL, ''
            FROM seen
            RETURNING id, assigned_at, (SELECT status FROM {complaints} WHERE id = complaint_id)
        """  # noqa: S608 - table names from the models; values are parameters
        params = {
            "seen": seen.pk, "complaint": seen.complaint_id, "vendor": new.vendor_id,
            "token": new.fence_token, "by": new.assigned_by_id, "label": new.actor_label,
            "statuses": list(statuses), "replaced": VendorAssignment.Ended.REPLACED,
        }  # fmt: skip
        status = self._insert_returning_status(new, sql, params)
        if status is not None:
            seen.active, seen.deactivated_at = False, new.assigned_at
            seen.ended_because = VendorAssignment.Ended.REPLACED
        return status

    def insert_if_none_active(
        self, new: "VendorAssignment", *, statuses: Iterable[str]
    ) -> str | None:
        """Insert ``new`` (unsaved; its pk and ``assigned_at`` are set) in one statement if
        its complaint has no active assignment and its status is one of ``statuses``;
        return the complaint's status, read in the same statement, or ``None`` when it
        wrote nothing.

        A first assignment's state check and write. Like ``replace_if_active`` it runs
        after the fence UPDATE took the complaint's row lock: every fenced writer of the
        complaint runs it in turn, each statement reading what the previous one committed.
        """
        table = connections[self.db].ops.quote_name(self.model._meta.db_table)
        complaints = connections[self.db].ops.quote_name(Complaint._meta.db_table)
        sql = f"""
            INSERT INTO {table} (complaint_id, vendor_id, active, fence_token, assigned_at,
                                 assigned_by_id, actor_label, deactivated_at, ended_because)
            SELECT %(complaint)s, %(vendor)s, true, %(token)s, statement_timestamp(), %(by)s,
                   %(label)s, NULL, ''
            WHERE NOT EXISTS (
                SELECT 1 FROM {table} WHERE complaint_id = %(complaint)s AND active
            ) AND EXISTS (
                SELECT 1 FROM {complaints} WHERE id = %(complaint)s AND status = ANY(%(statuses)s)
            )
            RETURNING id, assigned_at, (SELECT status FROM {complaints} WHERE id = complaint_id)
        """  # noqa: S608 - table names from the models; values are parameters
        params = {
            "complaint": new.complaint_id, "vendor": new.vendor_id, "token": new.fence_token,
            "by": new.assigned_by_id, "label": new.actor_label, "statuses": list(statuses),
        }  # fmt: skip
        return self._insert_returning_status(new, sql, params)

    def end_active(self, complaint_id: int, *, at, because: str) -> int | None:
        """End the complaint's active assignment at ``at`` (``because``: an ``Ended``) in
        one statement; return its id, or ``None`` when none was active. Runs in the
        transaction of the change that ends it, under the complaint's row lock."""
        table = connections[self.db].ops.quote_name(self.model._meta.db_table)
        sql = f"""
            UPDATE {table} SET active = false, deactivated_at = %(at)s, ended_because = %(because)s
            WHERE complaint_id = %(complaint)s AND active
            RETURNING id
        """  # noqa: S608 - the table name from the model; values are parameters
        self._for_write = True
        with connections[self.db].cursor() as cursor:
            cursor.execute(sql, {"complaint": complaint_id, "at": at, "because": because})
            row = cursor.fetchone()  # at most one is active (the partial unique index)
        return row[0] if row is not None else None

    def _insert_returning_status(self, new: "VendorAssignment", sql: str, params) -> str | None:
        """Run a statement that inserts ``new`` and returns ``(id, assigned_at, complaint
        status)``, or no row when it wrote nothing; mark ``new`` saved and return the
        status."""
        self._for_write = True
        with connections[self.db].cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        new.pk, new.assigned_at, status = row
        new._state.adding, new._state.db = False, self.db
        return status


class VendorAssignment(models.Model):
    """A vendor sent to a complaint. At most one is active per complaint (partial unique).

    An assignment ends when another vendor replaces it, or when its complaint is closed
    (``ended_because``); it is never deleted.
    """

    class Ended(models.TextChoices):
        REPLACED = "replaced", _("replaced")
        CLOSED = "closed", _("complaint closed")

    complaint = models.ForeignKey(Complaint, on_delete=models.CASCADE, related_name="assignments")
    vendor = models.ForeignKey(Vendor, on_delete=models.PROTECT, related_name="assignments")
    active = models.BooleanField(_("active"), default=True)
    fence_token = models.BigIntegerField(_("fencing token"))
    assigned_at = models.DateTimeField(_("assigned at"), default=timezone.now)
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    actor_label = models.CharField(_("actor"), max_length=200, blank=True, default="")
    deactivated_at = models.DateTimeField(_("deactivated at"), null=True, blank=True)
    ended_because = models.CharField(
        _("ended because"), max_length=20, choices=Ended.choices, blank=True, default=""
    )

    objects = VendorAssignmentQuerySet.as_manager()

    class Meta:
        ordering = ["-assigned_at"]
        permissions = [("assign_vendor", "Can assign vendors to complaints")]
        constraints = [
            models.UniqueConstraint(
                fields=["complaint"],
                condition=Q(active=True),
                name="one_active_assignment_per_complaint",
            ),
            models.CheckConstraint(
                condition=Q(fence_token__gt=0), name="assignment_token_positive"
            ),
            # What an invoice's composite foreign key points at: it bills this assignment
            # and names its vendor (vendors 0007).
            models.UniqueConstraint(fields=["id", "vendor"], name="assignment_of_vendor"),
        ]

    def __str__(self):
        state = _("active") if self.active else _("inactive")
        return f"{self.vendor} → {self.complaint} ({state})"
