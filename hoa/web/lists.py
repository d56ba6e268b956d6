"""Staff lists: pages clamped to the ones that exist, and a GET filter form.

Every paginated staff and operator list reads its ``?page=`` through ``page_number`` and
``clamped_page``: a number out of range is the nearest page (``?page=99`` the last,
``?page=0`` the first), one that is not a number in ASCII digits (``abc``, full-width
digits, `` 1``) is a 400 saying so, and no page number is ever a 404. A filter parameter
that does not validate is a 400 page saying which, never a silently different list.
"""

import re

from django import forms
from django.core.paginator import Page, Paginator
from django.utils.translation import gettext as _
from django.views.generic import ListView

from hoa.answers.pages import error_page
from hoa.web.access import OrganizationMixin

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


def first_error(form: forms.Form) -> str:
    """The one sentence a 400 page shows for a form that did not validate."""
    return next(iter(form.errors.values()))[0]


class PagedListView(OrganizationMixin, ListView):
    """An organization's list whose ``?page=`` is clamped to the pages that exist; a
    page that is not a number is a 400 page (the association's layout kept)."""

    def get(self, request, *args, **kwargs):
        try:
            self.page_number = page_number(request.GET.get(self.page_kwarg))
        except BadPageNumber as exc:
            return error_page(request, 400, _("Not a page"), str(exc))
        return super().get(request, *args, **kwargs)

    def paginate_queryset(self, queryset, page_size):
        paginator = self.get_paginator(
            queryset,
            page_size,
            orphans=self.get_paginate_orphans(),
            allow_empty_first_page=self.get_allow_empty(),
        )
        page = clamped_page(paginator, self.page_number)
        return paginator, page, page.object_list, page.has_other_pages()


class FilteredListView(PagedListView):
    """An organization's list filtered by ``filter_form_class`` (bound to the GET)."""

    filter_form_class: type[forms.Form]

    def get(self, request, *args, **kwargs):
        self.filters = self.filter_form_class(request.GET or None, **self.filter_form_kwargs())
        if request.GET and not self.filters.is_valid():
            return error_page(request, 400, _("Not a filter"), first_error(self.filters))
        return super().get(request, *args, **kwargs)

    def filter_form_kwargs(self) -> dict:
        return {}

    @property
    def cleaned_filters(self) -> dict:
        return self.filters.cleaned_data if self.filters.is_bound else {}

    def get_context_data(self, **kwargs):
        return super().get_context_data(filters=self.filters, **kwargs)
