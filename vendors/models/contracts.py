"""Vendors and their contract windows with each association."""

from datetime import date, timedelta

from django.conf import settings
from django.contrib.postgres.aggregates import JSONBAgg
from django.db import models
from django.db.models import Exists, F, Max, OuterRef, Q, Value
from django.db.models.functions import JSONObject
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.models import Organization
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
            id="contracts__id",
            starts_on="contracts__starts_on",
            ends_on="contracts__ends_on",
            insured_until="contracts__insurance_expires_on",
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
                    insurance_expires_on=_date_or_none(window["insured_until"]),
                )
                for window in self.contract_windows
            ]
        return list(VendorContract.objects.filter(vendor=self, organization=organization))

    def insured_until(self, organization, contracts=None) -> date | None:
        """The expiry of this vendor's latest insurance certificate on file with
        ``organization`` (on any of its contracts with it, ``contracts`` if already read),
        or ``None`` when none is."""
        if contracts is None:
            contracts = self.contracts_with(organization)
        expiries = [
            contract.insurance_expires_on
            for contract in contracts
            if contract.insurance_expires_on is not None
        ]
        return max(expiries, default=None)


def _date_or_none(value: str | None) -> date | None:
    return date.fromisoformat(value) if value else None


class VendorContractQuerySet(TenantQuerySet):
    def active_on(self, day=None):
        day = day or timezone.localdate()
        return self.filter(starts_on__lte=day, ends_on__gte=day)

    def insurance_lapsing(self, organization, *, today: date, within: timedelta):
        """The vendors of ``organization`` with a live contract (one covering ``today``)
        whose latest certificate lapses in the ``within`` after ``today`` or has lapsed,
        with no later one on file: one row per vendor, ``vendor_id``, ``vendor__name`` and
        ``insured_until``, soonest first. A vendor without any certificate on file is
        listed with ``insured_until`` ``None``. A vendor whose contracts have all ended (or
        not begun) is not: nothing of theirs lapses on work the association can give."""
        live = self.model.objects.filter(
            organization=organization, vendor_id=OuterRef("vendor_id")
        ).active_on(today)
        latest = (
            self.filter(organization=organization)
            .filter(Exists(live))
            .values("vendor_id", "vendor__name")
            .annotate(insured_until=Max("insurance_expires_on"))
        )
        soon = Q(insured_until__isnull=True) | Q(insured_until__lte=today + within)
        return latest.filter(soon).order_by(
            F("insured_until").asc(nulls_first=True), "vendor__name"
        )


class VendorContract(models.Model):
    # PROTECT: a vendor works for several associations; deleting it must never take one
    # association's contract (or lapse record) with it. Each association ends its own.
    vendor = models.ForeignKey(Vendor, on_delete=models.PROTECT, related_name="contracts")
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="vendor_contracts"
    )
    starts_on = models.DateField(_("starts on"))
    ends_on = models.DateField(_("ends on"))
    # The vendor's certificate of insurance, as presented for this contract. A vendor whose
    # latest certificate with the association has lapsed (or who has none on file: NULL,
    # as on contracts made before certificates were kept) may not be assigned or paid.
    insurance_expires_on = models.DateField(
        _("insurance certificate expires on"),
        null=True,
        blank=False,
        help_text=_(
            "The expiry date on the vendor's certificate of insurance. The vendor cannot be "
            "assigned or paid once it has passed."
        ),
    )

    objects = VendorContractQuerySet.as_manager()

    class Meta:
        ordering = ["-starts_on"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_on__gte=F("starts_on")), name="contract_ends_after_start"
            )
        ]
        permissions = [
            ("record_insurance", "Can record a vendor's insurance certificate on a contract"),
        ]

    def __str__(self):
        return f"{self.vendor} for {self.organization} ({self.starts_on} to {self.ends_on})"

    def covers(self, day) -> bool:
        return self.starts_on <= day <= self.ends_on


class CertificateRecorded(models.Model):
    """Staff recorded the expiry of a vendor's insurance certificate on a contract
    (``vendors.insurance.record_certificate``): who, when, and the expiry before and after.
    The contract's insurance history, as the timelines are the invoices'."""

    contract = models.ForeignKey(
        VendorContract, on_delete=models.CASCADE, related_name="certificates_recorded"
    )
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="certificates_recorded"
    )
    expires_before = models.DateField(_("expiry before"), null=True, blank=True)
    expires_on = models.DateField(_("certificate expires on"))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    # The username as it was: the history outlives a renamed or deleted account.
    actor_label = models.CharField(_("recorded by"), max_length=150)
    at = models.DateTimeField(_("recorded at"), default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self):
        return f"{self.contract}: certificate until {self.expires_on} ({self.actor_label})"


class InsuranceLapse(models.Model):
    """A vendor's insurance with an association lapsed: its latest certificate expired on
    ``expired_on``. Recorded once per certificate by the daily job
    (``vendors.insurance.record_lapses``), which also writes it on the timelines."""

    vendor = models.ForeignKey(Vendor, on_delete=models.PROTECT, related_name="insurance_lapses")
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="insurance_lapses"
    )
    expired_on = models.DateField(_("certificate expired on"))
    recorded_at = models.DateTimeField(_("recorded at"), default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-expired_on", "vendor__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["vendor", "organization", "expired_on"], name="one_lapse_per_certificate"
            )
        ]

    def __str__(self):
        return f"{self.vendor} uninsured with {self.organization} since {self.expired_on}"
