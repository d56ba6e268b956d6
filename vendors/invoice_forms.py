"""The forms of the invoice pages and the admin: record an invoice, the changes (each
carrying the version the person saw), paying, and the list's filters.

Bad input is a 400 with the form's errors; the service checks the same rules again (the
command and the admin call it too), so these only say it sooner, next to the field.
"""

import re
from decimal import Decimal

from django import forms
from django.utils.translation import gettext_lazy as _

from hoa.web.fields import IdChoiceField, MoneyField, has_control_characters
from vendors import invoices
from vendors.exceptions import InvoiceRefused, InvoiceRule
from vendors.models import Invoice, Vendor, VendorAssignment
from vendors.models.invoices import MAX_AMOUNT

_ASCII_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class AsciiDateField(forms.DateField):
    """A date as ``YYYY-MM-DD`` in ASCII digits (the date input sends that), nothing else."""

    widget = forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")

    def to_python(self, value):
        if isinstance(value, str) and value.strip() and not _ASCII_DATE.fullmatch(value.strip()):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)


def _amount_field(label) -> MoneyField:
    return MoneyField(label=label, min_value=Decimal("0.01"), max_value=MAX_AMOUNT)


def _reason_field(label) -> forms.CharField:
    return forms.CharField(
        label=label,
        max_length=invoices.REASON_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": _("Say why.")},
    )


class InvoiceForm(forms.Form):
    """A vendor's invoice for one of a complaint's assignments."""

    assignment = IdChoiceField(
        queryset=VendorAssignment.objects.none(),
        label=_("Vendor sent"),
        empty_label=None,
        error_messages={"invalid_choice": _("Choose one of this complaint's vendors.")},
    )
    number = forms.CharField(label=_("Vendor's invoice number"), max_length=64)
    amount = _amount_field(_("Amount"))
    issued_on = AsciiDateField(label=_("Invoice date"))
    due_on = AsciiDateField(label=_("Due date"))
    pdf = forms.FileField(
        label=_("PDF (optional, at most 10 MB)"),
        required=False,
        widget=forms.ClearableFileInput(attrs={"accept": "application/pdf"}),
    )

    def __init__(self, *args, complaint, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["assignment"]
        field.queryset = complaint.assignments.select_related("vendor").order_by("-assigned_at")
        field.label_from_instance = lambda a: a.vendor.name

    def clean_number(self):
        number = self.cleaned_data["number"].strip()
        if has_control_characters(number):
            raise forms.ValidationError(_("Enter the number as printed on the invoice."))
        return number

    def clean_pdf(self):
        upload = self.cleaned_data.get("pdf")
        if not upload:
            return None
        try:
            return invoices.read_pdf(upload)
        except InvoiceRefused as refused:
            raise forms.ValidationError(refused.message) from refused

    def clean(self):
        cleaned = super().clean()
        issued, due = cleaned.get("issued_on"), cleaned.get("due_on")
        try:
            invoices.check_dates(issued, due)
        except InvoiceRefused as refused:
            field = "issued_on" if refused.rule == InvoiceRule.ISSUED_OUT_OF_RANGE else "due_on"
            self.add_error(field, refused.message)
        return cleaned


class SeenForm(forms.Form):
    """The version of the invoice the page showed: every change is a compare-and-swap on it."""

    seen = forms.IntegerField(
        widget=forms.HiddenInput,
        min_value=1,
        max_value=2**31 - 1,
        error_messages={"required": _("This page was out of date. Reload it.")},
    )


class ApproveForm(SeenForm):
    confirm_not_duplicate = forms.BooleanField(
        required=False, label=_("I checked: this is not the same bill as the other one")
    )


class RejectForm(SeenForm):
    reason = _reason_field(_("Why the association disputes it"))


class VoidForm(SeenForm):
    """Its reason box is labelled apart from rejecting's: the two sit in one card."""

    reason = _reason_field(_("Why it is voided"))


class AmountForm(SeenForm):
    amount = _amount_field(_("New amount"))
    reason = _reason_field(_("Why it changes"))


class PayForm(SeenForm):
    """Paying carries the version too: an invoice changed since the page was shown (voided,
    say) is answered 409, not 400."""


class InvoiceFilterForm(forms.Form):
    status = forms.ChoiceField(
        required=False,
        label=_("Status"),
        choices=[("", _("Any status")), *Invoice.Status.choices],
        error_messages={"invalid_choice": _("Choose a status from the list.")},
    )
    vendor = IdChoiceField(
        queryset=Vendor.objects.none(),
        required=False,
        label=_("Vendor"),
        empty_label=_("Any vendor"),
        error_messages={"invalid_choice": _("Choose a vendor of this association.")},
    )
    waiting = forms.TypedChoiceField(
        required=False,
        label=_("Approval"),
        choices=[("", _("Anyone's")), ("me", _("Waiting for my approval"))],
        coerce=lambda value: value == "me",
        empty_value=False,
        error_messages={"invalid_choice": _("Choose from the list.")},
    )
    overdue = forms.TypedChoiceField(
        required=False,
        label=_("Due"),
        choices=[("", _("Any due date")), ("yes", _("Overdue"))],
        coerce=lambda value: value == "yes",
        empty_value=False,
        error_messages={"invalid_choice": _("Choose from the list.")},
    )

    def __init__(self, *args, vendors, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["vendor"].queryset = vendors
