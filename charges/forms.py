"""Forms of the charges pages and admin action."""

import re
from datetime import date

from django import forms
from django.utils.translation import gettext_lazy as _

from charges.exceptions import InvalidMonth
from charges.models import MonthlyChargeRun

_MONTH_PATTERN = re.compile(r"([0-9]{4})-([0-9]{2})")  # [0-9]: \d also takes "٢٠٢٦-٠٣"


def parse_month(value: str) -> date:
    """Return the first day of the ``YYYY-MM`` month ``value``, or raise ``InvalidMonth``."""
    match = _MONTH_PATTERN.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise InvalidMonth(value, "format")
    year, month = int(match[1]), int(match[2])
    if not 1 <= month <= 12:
        raise InvalidMonth(value, "month")
    if year < 1:
        raise InvalidMonth(value, "year")
    return date(year, month, 1)


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


class RunFilterForm(forms.Form):
    """The run list's filter (a GET form); a status that is not one is a 400."""

    status = forms.ChoiceField(
        required=False,
        label=_("Status"),
        choices=[("", _("Any status")), *MonthlyChargeRun.Status.choices],
        error_messages={"invalid_choice": _("Choose a status from the list.")},
    )
