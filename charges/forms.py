"""Forms of the charges pages, admin action and command: what a month is, which months may
be billed, and when a month needs confirming."""

import re
from datetime import date

from django import forms
from django.conf import settings
from django.http import Http404
from django.utils.translation import gettext_lazy as _

from charges import answers
from charges.exceptions import InvalidMonth
from charges.models import MonthlyChargeRun, month_label
from charges.selectors import add_months, current_month
from hoa.web.fields import ParsedField

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


def month_of_address(segment: str) -> date:
    """The month a page's address names (``…/charges/<YYYY-MM>/``): one address per month.

    ``YYYY-MM`` exactly is the month's address. Another spelling of a month (``2026-12 ``,
    `` 2026-12``) is not a second address for it: ``Http404``, as for an id written with a
    leading zero (``hoa.web.fields``). What is no month at all raises ``InvalidMonth``
    (the 400 "Not a month" that says how to write one).
    """
    month = parse_month(segment)
    if month_label(month) != segment:
        raise Http404("not the canonical address of a month")
    return month


def billing_window() -> tuple[date, date]:
    """The first and the last month staff and cron may bill (``CHARGE_MONTHS_BACK`` before
    the current month to ``CHARGE_MONTHS_AHEAD`` after it)."""
    now = current_month()
    index = now.year * 12 + now.month - 1  # months since 0001-01, which bound the window
    back = min(settings.CHARGE_MONTHS_BACK, index - 12)
    ahead = min(settings.CHARGE_MONTHS_AHEAD, 9999 * 12 + 11 - index)
    return add_months(now, -back), add_months(now, ahead)


def in_billing_window(month: date) -> bool:
    """Whether ``month`` (a first day) may be billed now."""
    first, last = billing_window()
    return first <= month <= last


def parse_billing_month(value: str) -> date:
    """``parse_month``, refusing a month outside ``billing_window()``."""
    month = parse_month(value)
    if not in_billing_window(month):
        raise InvalidMonth(value, window=billing_window())
    return month


def needs_confirmation(month: date) -> bool:
    """Billing a month other than this one or the next is unusual: ask first."""
    now = current_month()
    return month not in (now, add_months(now, 1))


class MonthForm(forms.Form):
    """A ``YYYY-MM`` month that may be billed; ``cleaned_data["month"]`` is its first day."""

    month = ParsedField(
        parse_billing_month,
        label=_("Month"),
        widget=forms.TextInput(attrs={"type": "month", "placeholder": "YYYY-MM"}),
        help_text=_("The month to bill, as YYYY-MM."),
    )


class ConfirmedMonthForm(MonthForm):
    """The admin action's form: an unusual month needs its box ticked."""

    confirm = forms.BooleanField(
        label=_("Yes, bill this month even though it is not this month or the next"),
        help_text=_("Needed for a month other than this one or the next."),
        required=False,
    )

    def clean(self):
        cleaned = super().clean()
        month = cleaned.get("month")
        if month is not None and needs_confirmation(month) and not cleaned.get("confirm"):
            self.add_error("confirm", answers.confirm_month(month))
        return cleaned


class RunFilterForm(forms.Form):
    """The run list's filter (a GET form); a status that is not one is a 400."""

    status = forms.ChoiceField(
        required=False,
        label=_("Status"),
        choices=[("", _("Any status")), *MonthlyChargeRun.Status.choices],
        error_messages={"invalid_choice": _("Choose a status from the list.")},
    )
