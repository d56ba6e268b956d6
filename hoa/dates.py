"""The one way people are shown dates and months, on every staff page and in sentences.

A moment ``2026-12-03 17:44 EST`` in the page's time zone (``when``; also the project's
``DATETIME_FORMAT``, so the admin shows it too), a day ``2026-12-03``, a month ``December
2026`` (``month_name``; ``YYYY-MM`` only in URLs, CSV files and resource names). Only the
lock page shows seconds. ``tests/pages/test_date_formats.py`` reads every page for other shapes.
"""

from datetime import date, datetime

from django.utils import formats, timezone

MOMENT = "Y-m-d H:i T"
MONTH = "F Y"


def when(moment: datetime | None) -> str:
    """``2026-12-03 17:44 EST``: ``moment`` in the active time zone; ``""`` for none.

    ``formats.date_format(local, MOMENT)`` written out: the same text (every part of
    ``MOMENT`` is digits or the zone's abbreviation, in any language), a tenth of the
    time. A list draws two per row, and Django's formatter cost more than the rest of the
    row. ``tests/pages/test_date_formats.py`` compares them."""
    if moment is None:
        return ""
    local = timezone.localtime(moment)
    zone = local.tzinfo
    # Django's ``T``: no abbreviation in the hour a clock change repeats or skips.
    ambiguous = zone.utcoffset(local.replace(fold=not local.fold)) != zone.utcoffset(local)
    abbreviation = "" if ambiguous else str(zone.tzname(local))
    day = f"{local.year:04d}-{local.month:02d}-{local.day:02d}"
    return f"{day} {local.hour:02d}:{local.minute:02d} {abbreviation}"


def zone_label(moment: datetime | None = None) -> str:
    """The active time zone as an input shows it beside itself: ``America/New_York (EST)``,
    its abbreviation at ``moment`` (now by default); ``UTC`` alone for UTC."""
    zone = timezone.get_current_timezone()
    abbreviation = (moment or timezone.now()).astimezone(zone).strftime("%Z")
    name = str(zone)
    return name if abbreviation in ("", name) else f"{name} ({abbreviation})"


def month_name(month: date) -> str:
    """``December 2026``."""
    return formats.date_format(month, MONTH)
