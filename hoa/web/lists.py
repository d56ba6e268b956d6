"""Staff lists with a GET filter form: a parameter that does not validate is a 400 page
saying which, never a silently different list."""

from django import forms
from django.utils.translation import gettext as _
from django.views.generic import ListView

from hoa.answers.pages import error_page
from hoa.web.access import OrganizationMixin


def first_error(form: forms.Form) -> str:
    """The one sentence a 400 page shows for a form that did not validate."""
    return next(iter(form.errors.values()))[0]


class FilteredListView(OrganizationMixin, ListView):
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
