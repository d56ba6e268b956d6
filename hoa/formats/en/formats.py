"""The project's formats for English (``FORMAT_MODULE_PATH``): a moment is shown one way
everywhere, the staff pages' way (``hoa.dates``), in the admin and any ``|date`` too, with
its zone's abbreviation: ``2026-12-03 17:44 EST``, never "Dec. 3, 2026, 5:44 p.m.". A day
is ``2026-12-03``. Input formats stay Django's."""

DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i"
