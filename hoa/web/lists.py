"""Staff lists: pages clamped to the ones that exist, and a GET filter form.

Every paginated staff list reads its ``?page=`` through ``hoa.paging``: a number out of
range is the nearest page, one that is not a number is a 400 saying so, and no page number
is ever a 404. A filter parameter that does not validate is a 400 page saying which, never
a silently different list.
"""

import csv
import itertools
from collections.abc import Iterable

from django import forms
from django.http import StreamingHttpResponse
from django.utils.translation import gettext as _
from django.views.generic import ListView

from hoa.answers.table import error_page
from hoa.paging import BadPageNumber, clamped_page, page_number
from hoa.tenancy import OrganizationMixin


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


def csv_download(
    request, filename: str, header: tuple, rows: Iterable[tuple]
) -> StreamingHttpResponse:
    """A list as a CSV attachment, streamed (Django's documented pattern: ``csv.writer`` on a
    file whose ``write`` returns the line): ``header``, then each of ``rows`` as it is read.
    Text a person typed goes through ``csv_cell``. A HEAD answers the headers alone, the
    rows never read (the server would read the body only to drop it)."""
    writer = csv.writer(_Echo())
    lines = itertools.chain([writer.writerow(header)], map(writer.writerow, rows))
    if request.method == "HEAD":
        lines = iter(())
    response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class _Echo:
    def write(self, value):
        return value


def csv_cell(text: str) -> str:
    """Text a spreadsheet must not run as a formula (``=HYPERLINK(…)``, ``+1``, ``@x``)."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
