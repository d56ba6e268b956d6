import functools

from django import forms
from django.db.models import Max, OuterRef, Subquery
from django.utils.translation import gettext_lazy as _

from hoa.models import Complaint, Organization
from hoa.web.fields import IdChoiceField
from vendors.insurance import today_of
from vendors.invoice_forms import AsciiDateField
from vendors.models import Vendor, VendorAssignment, VendorContract


class VendorSelect(forms.Select):
    """The vendor menu: the options whose values are in ``disabled_values`` are shown and
    cannot be chosen."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.disabled_values: set[str] = set()

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if str(value) in self.disabled_values:
            option["attrs"]["disabled"] = True
        return option


class AssignVendorForm(forms.Form):
    """The vendor to send to a complaint, for the staff page and the admin action.

    On the staff page (``complaint`` given) the form also carries what the page showed: the
    assignment, in the hidden ``replacing`` field (empty when it showed none), which a
    reassignment replaces and no other; and the complaint's status, in ``seen_status``, so
    that a complaint closed since the page was shown is told apart (409) from one that was
    closed then (400). The admin action assigns many complaints with one form and goes
    without both.
    """

    vendor = IdChoiceField(
        queryset=Vendor.objects.none(),
        widget=VendorSelect,
        label=_("Vendor"),
        empty_label=_("Choose a vendor…"),
        error_messages={
            "required": _("Choose a vendor."),
            "invalid_choice": _("Choose a vendor that has a contract with this association."),
        },
    )
    reassign = forms.BooleanField(
        required=False,
        label=_("Replace the current vendor"),
        help_text=_("Without this, a complaint that already has a vendor keeps it."),
    )
    replacing = IdChoiceField(
        queryset=VendorAssignment.objects.none(),
        required=False,
        widget=forms.HiddenInput,
        error_messages={
            "invalid_choice": _("This page was out of date. Reload it and choose again."),
        },
    )

    seen_status = forms.ChoiceField(
        choices=Complaint.Status.choices,
        required=False,
        widget=forms.HiddenInput,
        error_messages={
            "invalid_choice": _("This page was out of date. Reload it and choose again."),
        },
    )

    def __init__(
        self, *args, organization: Organization, complaint: Complaint | None = None, **kwargs
    ):
        super().__init__(*args, **kwargs)
        field = self.fields["vendor"]
        # Validation accepts every vendor the association has a contract with, so that an
        # ended or future contract gets its own answer (with its dates) from the service;
        # the menu offers only the vendors whose contract covers today. Malformed and
        # unknown ids, and other associations' vendors, are invalid choices.
        # Each vendor comes with its contracts here, which the service checks next.
        field.queryset = Vendor.objects.with_contracts(organization)
        today = today_of(organization)
        widget = field.widget

        @functools.cache  # read once: the menu is asked for twice (its first option too)
        def offered() -> list[Vendor]:
            active = Vendor.objects.with_active_contract(organization, on=today).order_by("name")
            return list(active.annotate(insured_until=_insured_until(organization)))

        def menu():
            # A vendor whose insurance lapsed is listed, not offered: disabled, the reason
            # beside its name (the service would refuse it: ``check_insured``).
            vendors = offered()
            widget.disabled_values = {
                str(v.pk) for v in vendors if v.insured_until is None or v.insured_until < today
            }
            return [("", field.empty_label), *((v.pk, _label(v, today)) for v in vendors)]

        # A callable: the menu's query is built and run when a page renders it, not for
        # every POST.
        field.choices = menu
        if complaint is None:
            del self.fields["replacing"], self.fields["seen_status"]
        else:
            # Any of this complaint's assignments, replaced ones too: a page shown before
            # a reassignment carries an assignment that is no longer active, and that is
            # the case the service must refuse, not the form.
            self.fields["replacing"].queryset = complaint.assignments.select_related("vendor")

    @property
    def carries_shown_assignment(self) -> bool:
        """Whether the POST carried ``replacing`` (the page's form always does; a client
        posting without it showed nothing, and is treated like the command)."""
        return "replacing" in self.fields and self.add_prefix("replacing") in self.data


def _insured_until(organization: Organization) -> Subquery:
    """A vendor's latest certificate with ``organization``, on any of its contracts with it
    (``Vendor.insured_until`` in SQL)."""
    latest = (
        VendorContract.objects.filter(vendor=OuterRef("pk"), organization=organization)
        .values("vendor")
        .annotate(latest=Max("insurance_expires_on"))
        .values("latest")
    )
    return Subquery(latest)


def _label(vendor: Vendor, today) -> str:
    """The vendor's name and trade; why it may not be assigned, when its insurance lapsed."""
    name = f"{vendor.name} ({vendor.trade})" if vendor.trade else vendor.name
    insured_until = vendor.insured_until
    if insured_until is not None and insured_until >= today:
        return name
    if insured_until is None:
        return _("%(vendor)s — no insurance certificate on file") % {"vendor": name}
    return _("%(vendor)s — insurance lapsed on %(day)s") % {
        "vendor": name,
        "day": insured_until.isoformat(),
    }


class VendorFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=100,
        label=_("Search"),
        widget=forms.TextInput(attrs={"type": "search", "placeholder": _("Name or trade")}),
        error_messages={"max_length": _("Search for at most %(limit_value)s characters.")},
    )


class CertificateForm(forms.Form):
    """The expiry on a vendor's new insurance certificate, for one of its contracts with the
    association; ``seen`` carries the expiry the page showed (empty: none on file)."""

    contract = IdChoiceField(
        queryset=VendorContract.objects.none(),
        widget=forms.HiddenInput,
        error_messages={
            "invalid_choice": _("This page was out of date. Reload it and enter the date again."),
        },
    )
    seen = AsciiDateField(required=False, widget=forms.HiddenInput)
    expires_on = AsciiDateField(
        label=_("The new certificate expires on"),
        error_messages={"required": _("Enter the expiry date on the certificate.")},
    )

    def __init__(self, *args, contracts=None, **kwargs):
        super().__init__(*args, **kwargs)
        if contracts is not None:  # a POST: one of the vendor's contracts with the association
            self.fields["contract"].queryset = contracts
