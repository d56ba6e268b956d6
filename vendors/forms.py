from django import forms
from django.utils.translation import gettext_lazy as _

from hoa.models import Complaint, Organization
from hoa.web.fields import IdChoiceField
from vendors.models import Vendor, VendorAssignment


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
        active = Vendor.objects.with_active_contract(organization).order_by("name")
        # A callable: the menu's query runs when a page renders it, not for every POST.
        field.choices = lambda: [("", field.empty_label), *((v.pk, _label(v)) for v in active)]
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


def _label(vendor: Vendor) -> str:
    return f"{vendor.name} ({vendor.trade})" if vendor.trade else vendor.name


class VendorFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=100,
        label=_("Search"),
        widget=forms.TextInput(attrs={"type": "search", "placeholder": _("Name or trade")}),
        error_messages={"max_length": _("Search for at most %(limit_value)s characters.")},
    )
