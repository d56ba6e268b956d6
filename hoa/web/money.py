"""Amounts of money as people read them: the deployment's ``CURRENCY`` in the locale's format.

Babel knows each currency's symbol, its number of decimals and where the symbol goes in
each locale (``$1,234.50`` in en-US, ``1.234,50 €`` in de-DE); the active language picks
the locale.
"""

from decimal import Decimal

from babel import Locale
from babel.numbers import format_currency, parse_pattern
from django.conf import settings
from django.utils.translation import get_language, to_locale


def format_money(
    amount: Decimal | int | None, currency: str | None = None, *, whole: bool = False
) -> str:
    """``$1,234.50``; ``whole``: rounded to a whole unit, for a chart's label (``$1,235``)."""
    if amount is None:
        return "—"
    locale = to_locale(get_language() or settings.LANGUAGE_CODE)
    if not whole:
        return format_currency(amount, currency or settings.CURRENCY, locale=locale)
    pattern = parse_pattern(Locale.parse(locale).currency_formats["standard"].pattern)
    pattern.frac_prec = (0, 0)
    return pattern.apply(
        amount, Locale.parse(locale), currency=currency or settings.CURRENCY, currency_digits=False
    )
