"""Monthly charge runs: one per organization and month, fenced on ``last_fence_token``."""

from django.db import connections, models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.dates import month_name
from hoa.models import Organization, Unit
from hoa.tenancy import TenantQuerySet
from locking.models import FencedModel


def month_label(month) -> str:
    """``YYYY-MM`` with a four-digit year, whatever the year (``%Y`` gives ``1-01``)."""
    return f"{month.year:04d}-{month.month:02d}"


class MonthlyChargeRunQuerySet(TenantQuerySet):
    def completed(self):
        return self.filter(status=MonthlyChargeRun.Status.COMPLETED)

    def replan_charge_checks(self) -> None:
        """Drop the plans this database session has cached (``DISCARD PLANS``); the month
        start calls it before each chunk of associations.

        Every charge a run inserts is checked against its run by PostgreSQL's foreign-key
        trigger, whose query plan the session caches. Planned while the runs table is
        almost empty (a deployment's first month start, a table vacuumed empty), it is a
        sequential scan, and it stays one while the walk adds thousands of runs: each
        charge then reads the whole table, and the cost per association grows with the
        batch (docs/benchmarks.md, "What grows with the batch"). Discarded, the next check
        is planned against the table as it is now: an index scan once it has a few pages.
        Prepared statements stay prepared; only their plans are made again.
        """
        with connections[self.db].cursor() as cursor:
            cursor.execute("DISCARD PLANS")


class MonthlyChargeRun(FencedModel):
    """The one run that bills an organization's units for one month.

    The row is created before the work starts so that it can carry the fence
    (``last_fence_token``); ``status`` turns ``completed`` in the same transaction that
    inserts the charges, so a completed run is final.
    """

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        COMPLETED = "completed", _("Completed")

    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="charge_runs"
    )
    month = models.DateField(_("month"), help_text=_("First day of the billed month."))
    status = models.CharField(
        _("status"), max_length=20, choices=Status.choices, default=Status.PENDING
    )
    started_at = models.DateTimeField(_("started at"), default=timezone.now)
    completed_at = models.DateTimeField(_("completed at"), null=True, blank=True)
    total = models.DecimalField(_("total"), max_digits=14, decimal_places=2, default=0)
    charge_count = models.PositiveIntegerField(_("charges"), default=0)
    completed_by = models.CharField(_("completed by"), max_length=200, blank=True, default="")

    objects = MonthlyChargeRunQuerySet.as_manager()

    class Meta:
        ordering = ["-month", "organization__name"]
        permissions = [("generate_charges", "Can generate monthly charges")]
        constraints = [
            models.UniqueConstraint(fields=["organization", "month"], name="one_run_per_org_month"),
            models.CheckConstraint(condition=Q(month__day=1), name="run_month_is_first_day"),
            models.CheckConstraint(
                condition=Q(status="pending", completed_at__isnull=True)
                | Q(status="completed", completed_at__isnull=False),
                name="run_completed_at_matches_status",
            ),
        ]

    def __str__(self):
        # For people (the admin's titles, the charge's own string): "December 2026".
        return f"{self.organization} · {month_name(self.month)}"

    @property
    def is_completed(self) -> bool:
        return self.status == self.Status.COMPLETED

    @property
    def month_label(self) -> str:
        return month_label(self.month)


class MonthlyChargeQuerySet(TenantQuerySet):
    tenant_path = "run__organization"


class MonthlyCharge(models.Model):
    run = models.ForeignKey(MonthlyChargeRun, on_delete=models.CASCADE, related_name="charges")
    unit = models.ForeignKey(Unit, on_delete=models.PROTECT, related_name="charges")
    amount = models.DecimalField(_("amount"), max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = MonthlyChargeQuerySet.as_manager()

    class Meta:
        ordering = ["run", "unit__label"]
        constraints = [
            models.UniqueConstraint(fields=["run", "unit"], name="one_charge_per_run_unit"),
        ]

    def __str__(self):
        return f"{self.run} · {self.unit.label}: {self.amount}"
