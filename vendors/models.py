"""Vendors, their contract windows per organization, and assignments to complaints."""

from collections.abc import Iterable
from datetime import date

from django.conf import settings
from django.contrib.postgres.aggregates import JSONBAgg
from django.db import connections, models
from django.db.models import F, Q, Value
from django.db.models.functions import JSONObject
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.models import Complaint, Organization
from hoa.tenancy import TenantQuerySet


class VendorQuerySet(TenantQuerySet):
    tenant_path = "contracts__organization"

    def for_user(self, user):
        # A vendor may hold contracts with several of the user's organizations.
        return super().for_user(user).distinct()

    def with_active_contract(self, organization, on=None):
        """Vendors whose contract with ``organization`` covers the date ``on`` (today)."""
        day = on or timezone.localdate()
        return self.filter(
            contracts__organization=organization,
            contracts__starts_on__lte=day,
            contracts__ends_on__gte=day,
        ).distinct()

    def with_contracts(self, organization):
        """Vendors with a contract with ``organization``, each carrying those contracts
        from the same query (``Vendor.contracts_with(organization)`` reads them)."""
        window = JSONObject(
            id="contracts__id", starts_on="contracts__starts_on", ends_on="contracts__ends_on"
        )
        return self.filter(contracts__organization=organization).annotate(
            contract_windows=JSONBAgg(window), contract_windows_of=Value(organization.pk)
        )


class Vendor(models.Model):
    name = models.CharField(_("name"), max_length=200)
    trade = models.CharField(_("trade"), max_length=100, blank=True, default="")
    email = models.EmailField(_("email"), blank=True, default="")

    objects = VendorQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def contracts_with(self, organization) -> list["VendorContract"]:
        """This vendor's contracts with ``organization``: those read with the vendor
        (``Vendor.objects.with_contracts``), else one query."""
        if getattr(self, "contract_windows_of", None) == organization.pk:
            return [
                VendorContract(
                    pk=window["id"],
                    vendor=self,
                    organization=organization,
                    starts_on=date.fromisoformat(window["starts_on"]),
                    ends_on=date.fromisoformat(window["ends_on"]),
                )
                for window in self.contract_windows
            ]
        return list(VendorContract.objects.filter(vendor=self, organization=organization))


class VendorContractQuerySet(TenantQuerySet):
    def active_on(self, day=None):
        day = day or timezone.localdate()
        return self.filter(starts_on__lte=day, ends_on__gte=day)


class VendorContract(models.Model):
    vendor = models.ForeignKey(Vendor, on_delete=models.CASCADE, related_name="contracts")
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="vendor_contracts"
    )
    starts_on = models.DateField(_("starts on"))
    ends_on = models.DateField(_("ends on"))

    objects = VendorContractQuerySet.as_manager()

    class Meta:
        ordering = ["-starts_on"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_on__gte=F("starts_on")), name="contract_ends_after_start"
            )
        ]

    def __str__(self):
        return f"{self.vendor} for {self.organization} ({self.starts_on} to {self.ends_on})"

    def covers(self, day) -> bool:
        return self.starts_on <= day <= self.ends_on


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
        ]

    def __str__(self):
        state = _("active") if self.active else _("inactive")
        return f"{self.vendor} → {self.complaint} ({state})"
