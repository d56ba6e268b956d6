"""Forms of the charges pages and admin action."""

from django import forms
from django.utils.translation import gettext_lazy as _

from charges.services import InvalidMonth, parse_month


class MonthForm(forms.Form):
    """A ``YYYY-MM`` month; ``cleaned_data["month"]`` is its first day."""

    month = forms.CharField(
        label=_("Month"),
        widget=forms.TextInput(attrs={"type": "month", "placeholder": "YYYY-MM"}),
        help_text=_("The month to bill, as YYYY-MM."),
    )

    def clean_month(self):
        try:
            return parse_month(self.cleaned_data["month"])
        except InvalidMonth as exc:
            raise forms.ValidationError(str(exc), code="invalid_month") from exc
