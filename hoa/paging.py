"""Page numbers for every paginated list, staff and operator alike.

A list reads its ``?page=`` through ``page_number`` and ``clamped_page``: a number out of
range is the nearest page (``?page=99`` the last, ``?page=0`` the first), one that is not a
number in ASCII digits (``abc``, full-width digits, `` 1``) is a 400 saying so, and no page
number is ever a 404. ``hoa.web``'s lists and ``hoa.ops``' lock status page both read it
here, so that neither imports the other.
"""

import re

from django import forms
from django.core.paginator import Page, Paginator
from django.utils.translation import gettext as _

# ASCII digits only (``int()`` would take every script's digits), an optional minus sign
# (a page before the first is the first). Longer than 18 digits is simply past the end.
_PAGE_NUMBER = re.compile(r"-?[0-9]+")
_LARGEST_PAGE = 10**18


class BadPageNumber(ValueError):
    """``?page=`` is not a number; ``str()`` is the sentence the 400 page shows."""

    def __init__(self, value: str):
        super().__init__(
            _('"%(value)s" is not a page number: use digits, e.g. page=2.') % {"value": value}
        )


def page_number(value: str | None) -> int:
    """The page ``value`` asks for (1 when absent), or raise ``BadPageNumber``.

    The number may be out of range; ``clamped_page`` brings it to the nearest page.
    """
    if value is None or value == "":
        return 1
    if not _PAGE_NUMBER.fullmatch(value):
        raise BadPageNumber(value[:20])
    if len(value.lstrip("-")) > 18:
        return -_LARGEST_PAGE if value.startswith("-") else _LARGEST_PAGE
    return int(value)


def clamped_page(paginator: Paginator, number: int) -> Page:
    """The page ``number`` of ``paginator``, or the nearest one that exists."""
    return paginator.page(min(max(number, 1), paginator.num_pages))


class PageNumberField(forms.CharField):
    """A form's ``page`` parameter: ``page_number`` as a field (``None`` when absent)."""

    widget = forms.HiddenInput

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("strip", False)  # " 2" is not a page number
        super().__init__(**kwargs)

    def to_python(self, value):
        value = super().to_python(value)
        if value in self.empty_values:
            return None
        try:
            return page_number(value)
        except BadPageNumber as exc:
            raise forms.ValidationError(str(exc), code="invalid") from exc
