"""``{{ complaint.opened_at|when }}`` and ``{{ run.month|month_name }}`` (``hoa.dates``)."""

from django import template

from hoa import dates

register = template.Library()


@register.filter
def when(moment):
    """``2026-12-03 17:44 EST``, in the active time zone (the association's on its pages)."""
    return dates.when(moment)


@register.filter
def month_name(month):
    """``December 2026``."""
    return dates.month_name(month) if month else ""
