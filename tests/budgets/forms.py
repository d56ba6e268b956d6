"""What a year is, for the staff page's URL, the admin action and the command."""

import re

from django import forms
from django.utils.translation import gettext_lazy as _

from tests.budgets.exceptions import InvalidYear

_YEAR = re.compile(r"[0-9]{4}")  # [0-9]: \d also takes other scripts' digits


def parse_year(value: str) -> int:
    """Return the year ``value`` (``YYYY``, 0001 to 9999), or raise ``InvalidYear``."""
    text = value.strip() if isinstance(value, str) else ""
    if not _YEAR.fullmatch(text) or int(text) < 1:
        raise InvalidYear(value)
    return int(text)


class YearForm(forms.Form):
    """The admin action's form: the year whose budgets to approve."""

    year = forms.CharField(label=_("Year"), max_length=4, help_text=_("As YYYY, e.g. 2027."))

    def clean_year(self):
        try:
            return parse_year(self.cleaned_data["year"])
        except InvalidYear as exc:
            raise forms.ValidationError(exc.message, code="invalid_year") from exc
