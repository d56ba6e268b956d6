"""The one way people are shown dates and months, on every staff page and in sentences.

- A moment: ``2026-12-03 17:44 EST`` (``when``), in the time zone active for the page (the
  association's on its pages, ``TIME_ZONE`` elsewhere), with the zone's abbreviation.
- A day (a contract's first and last): the moment's date part, ``2026-12-03``.
- A month: ``December 2026`` (``month_name``). ``YYYY-MM`` is for URLs, CSV files and
  resource names only.

The one exception is the operators' lock page, which works in seconds: its "as of" stamp
and its timeline's axis show the time of day to the second. ``tests/test_date_formats.py``
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


def month_name(month: date) -> str:
    """``December 2026``."""
    return formats.date_format(month, MONTH)
