"""The one way people are shown dates and months, on every staff page and in sentences.

- A moment: ``2026-12-03 17:44 EST`` (``when``), in the time zone active for the page (the
  association's on its pages, ``TIME_ZONE`` elsewhere), with the zone's abbreviation. The
  same format is the project's ``DATETIME_FORMAT`` (``hoa/formats``), so the admin and any
  ``|date`` show moments this way too.
- An input of a moment says its zone beside it (``zone_label``): ``America/New_York (EST)``.
- A day (a contract's first and last): the moment's date part, ``2026-12-03``.
- A month: ``December 2026`` (``month_name``). ``YYYY-MM`` is for URLs, CSV files and
  resource names only.

The one exception is the operators' lock page, which works in seconds: its "as of" stamp
and its timeline's axis show the time of day to the second. ``tests/pages/test_date_formats.py``
reads every staff and operator page for any other shape.
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
