from django import forms
from django.utils.translation import gettext_lazy as _

from hoa.models import Organization
from vendors.models import Vendor


class AssignVendorForm(forms.Form):
    """The vendor to send to a complaint, for the staff page and the admin action."""

    vendor = forms.ModelChoiceField(
        queryset=Vendor.objects.none(),
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

    def __init__(self, *args, organization: Organization, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["vendor"]
        # Validation accepts every vendor the association has a contract with, so that an
        # ended or future contract gets its own answer (with its dates) from the service;
        # the menu offers only the vendors whose contract covers today. Malformed and
        # unknown ids, and other associations' vendors, are invalid choices.
        field.queryset = Vendor.objects.filter(contracts__organization=organization).distinct()
        active = Vendor.objects.with_active_contract(organization).order_by("name")
        field.choices = [("", field.empty_label), *((v.pk, _label(v)) for v in active)]


def _label(vendor: Vendor) -> str:
    return f"{vendor.name} ({vendor.trade})" if vendor.trade else vendor.name
