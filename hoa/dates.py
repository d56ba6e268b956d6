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
    """``2026-12-03 17:44 EST``: ``moment`` in the active time zone; ``""`` for none."""
    if moment is None:
        return ""
    return formats.date_format(timezone.localtime(moment), MOMENT)


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
