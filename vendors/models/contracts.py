"""Vendors and their contract windows with each association."""

from datetime import date

from django.contrib.postgres.aggregates import JSONBAgg
from django.db import models
from django.db.models import F, Q, Value
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
