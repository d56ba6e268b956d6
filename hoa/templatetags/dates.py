"""``{{ complaint.opened_at|when }}`` and ``{{ run.month|month_name }}`` (``hoa.dates``).

On a page a moment is one unit that never breaks across lines (``2026-12-/05``): ``when``
wraps it in ``<span class="moment">`` (``white-space: nowrap``); ``when_text`` is the bare
text, for an attribute. ``unbroken`` does the same for the moments, dates and phone
numbers inside a sentence or a note (a 409's "assigned by alice on 2026-12-04 19:26 PST").
"""

import re

from django import template
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

from hoa import dates

register = template.Library()

# What is read as one thing: a moment or a day (hoa.dates), a phone number of 7+ digits.
_UNBROKEN = re.compile(
    r"\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2}(?: [A-Z]{2,5}(?![A-Za-z])|[+-]\d{2,4})?)?"
    r"|(?<![\w-])\+?\(?\d[\d ().-]{5,}\d(?![\w-])"
)


@register.filter
def when(moment):
    """``2026-12-03 17:44 EST``, in the active time zone (the association's on its pages),
    kept on one line."""
    text = dates.when(moment)
    return format_html('<span class="moment">{}</span>', text) if text else ""


@register.filter
def when_text(moment):
    """``when`` as plain text, for an attribute (a tooltip)."""
    return dates.when(moment)


_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _keep(match: re.Match) -> str:
    token = match[0]
    if not _DAY.match(token) and sum(char.isdigit() for char in token) < 7:
        return token  # a month (2030-01) or a short number: neither a moment nor a phone
    return f'<span class="moment">{token}</span>'


@register.filter(needs_autoescape=True)
def unbroken(text, autoescape=True):
    """``text`` (escaped) with its moments, dates and phone numbers kept on one line."""
    escaped = conditional_escape(text) if autoescape else text
    return mark_safe(_UNBROKEN.sub(_keep, str(escaped)))  # noqa: S308 - escaped first


@register.filter
def month_name(month):
    """``December 2026``."""
    return dates.month_name(month) if month else ""
