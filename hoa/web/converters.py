"""URL path converters of the product's routes.

``<id:pk>`` is every object id in a staff URL: a canonical positive integer in ASCII
digits, no leading zero, no sign, no space, and within a ``bigint``. Django's ``<int:…>``
serves ``/complaints/01/`` as ``/complaints/1/`` (two addresses for one page, and a way
round anything keyed on the path); here anything but the one spelling is a 404.
"""

from django.urls import register_converter

BIGINT_MAX = 2**63 - 1


class CanonicalIdConverter:
    regex = "[1-9][0-9]{0,18}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > BIGINT_MAX:
            raise ValueError(value)  # no such row can exist: the URL does not match
        return number

    def to_url(self, value) -> str:
        number = int(value)
        if not 0 < number <= BIGINT_MAX:
            raise ValueError(value)
        return str(number)


def register() -> None:
    """Make ``<id:…>`` available to URLconfs (``HoaConfig.ready``, before any loads)."""
    register_converter(CanonicalIdConverter, "id")
