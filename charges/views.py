"""Staff pages of monthly charges: the runs, one run, and the button that generates one.

The generate view is thin: the organization and permission checks come from
``OrganizationMixin`` (404 for an organization the user is not staff of, 403 without the
permission), the month is parsed, one service call does the work, and each outcome maps to
one answer (``hoa.answers.table``): 303 to the run page, 409 busy or superseded, 400 bad
month, 503 Redis down, 502 billing failed.
"""

from datetime import date

from django.conf import settings
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.views import View
from django.views.generic import TemplateView

from charges import answers
from charges.forms import (
    MonthForm,
    RunFilterForm,
    billing_window,
    in_billing_window,
    month_of_address,
    needs_confirmation,
    parse_billing_month,
)
from charges.models import MonthlyChargeRun, month_label
from charges.operations import GENERATE_PERMISSION, OPERATION
from charges.selectors import current_month, monthly_totals
from charges.services import generate_monthly_charges
from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.answers.table import error_page
from hoa.charts import Bar, bar_chart
from hoa.dates import month_name
from hoa.tenancy import OrganizationMixin
from hoa.web.lists import PagedListView, csv_cell, csv_download
from hoa.web.money import format_money
from hoa.web.posts import FencedPostView

CHART_MONTHS = 12


def totals_chart(organization, *, until: date):
    """The SVG bar chart of the last 12 months' totals, one bar per month (zero if none),
    each labelled with its month and its total in the currency; before any month has charges,
    a sentence instead of twelve flat bars."""
    totals = monthly_totals(organization=organization, until=until, months=CHART_MONTHS)
    if not any(total for _month, total in totals):
        return format_html(
            '<p class="empty" data-testid="no-totals">{}</p>',
            _("Each month's total appears here once its charges are generated."),
        )
    return bar_chart(
        [
            Bar(
                # The year under the first bar and each January: "Dec 2025, Jan 2026, Feb…"
                label=date_format(month, "M Y" if index == 0 or month.month == 1 else "M"),
                value=total,
                title=f"{month_name(month)}: {format_money(total)}",
            )
            for index, (month, total) in enumerate(totals)
        ],
        title=_("Monthly charge totals of the last 12 months"),
        value_format=lambda total: format_money(total, whole=True),
    )


def _bad_month(request, message: str):
    return error_page(request, 400, _("Not a month"), message)


def _can_generate(user) -> bool:
    return user.has_perm(GENERATE_PERMISSION)


class ChargeRunListView(PagedListView):
    """The organization's runs by month, a chart of the last 12 totals, the generate form."""

    template_name = "charges/run_list.html"
    context_object_name = "runs"
    paginate_by = 24

    def get(self, request, *args, **kwargs):
        # The "another month" form is a GET form: it leads to that month's run page,
        # whose button generates it.
        if "month" in request.GET:
            form = MonthForm(request.GET)
            if not form.is_valid():
                return _bad_month(request, form.errors["month"][0])
            return redirect(
                "charges:run", self.organization.slug, month_label(form.cleaned_data["month"])
            )
        self.filters = RunFilterForm(request.GET or None)
        if request.GET and not self.filters.is_valid():
            return error_page(request, 400, _("Not a filter"), self.filters.errors["status"][0])
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        runs = MonthlyChargeRun.objects.for_organization(self.organization)
        if self.filters.is_bound and (status := self.filters.cleaned_data["status"]):
            runs = runs.filter(status=status)
        return runs

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        month = current_month()
        context.update(
            current_month=month,
            current_run=MonthlyChargeRun.objects.for_organization(self.organization)
            .filter(month=month)
            .first(),
            filters=self.filters,
            month_form=MonthForm(initial={"month": month_label(month)}),
            can_generate=_can_generate(self.request.user),
            totals_chart=totals_chart(self.organization, until=month),
        )
        return context


class ChargeRunDetailView(OrganizationMixin, TemplateView):
    """One month: the run's status and fencing token, and its charges."""

    template_name = "charges/run_detail.html"

    def get(self, request, *args, **kwargs):
        try:
            self.month = month_of_address(kwargs["month"])
        except Refusal as exc:
            return answer_table.page(request, exc)
        return super().get(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        run = (
            MonthlyChargeRun.objects.for_organization(self.organization)
            .filter(month=self.month)
            .first()
        )
        context.update(
            month=self.month,
            month_label=month_label(self.month),
            run=run,
            charges=run.charges.select_related("unit").order_by("unit__label") if run else [],
            in_window=in_billing_window(self.month),
            billing_window=billing_window(),
            can_generate=_can_generate(self.request.user)
            and not (run and run.is_completed)
            and in_billing_window(self.month),
        )
        return context


class ChargeRunCsvView(OrganizationMixin, View):
    """``GET …/charges/<YYYY-MM>/charges.csv``: a completed run's charges, one row per unit.

    Columns, in this order: ``unit`` (the unit's label), ``amount`` (a plain decimal, as
    billed), ``currency``; rows by unit label. Streamed, so a large run is never held in
    memory. A month whose charges are not generated is a 404 that says so.
    """

    http_method_names = ["get", "head"]
    COLUMNS = ("unit", "amount", "currency")

    def get(self, request, *args, **kwargs):
        try:
            month = month_of_address(kwargs["month"])
        except Refusal as exc:
            return answer_table.page(request, exc)
        run = (
            MonthlyChargeRun.objects.for_organization(self.organization)
            .completed()
            .filter(month=month)
            .first()
        )
        if run is None:
            return error_page(
                request,
                404,
                _("No charges to download"),
                _("The charges of %(organization)s for %(month)s have not been generated.")
                % {"organization": self.organization.name, "month": month_name(month)},
            )
        filename = f"charges-{self.organization.slug}-{month_label(month)}.csv"
        return csv_download(request, filename, self.COLUMNS, self.rows(run))

    def rows(self, run: MonthlyChargeRun):
        charges = (
            run.charges.order_by("unit__label", "unit_id")
            .values_list("unit__label", "amount")
            .iterator(chunk_size=2000)
        )
        return ((csv_cell(label), amount, settings.CURRENCY) for label, amount in charges)


class GenerateChargesView(FencedPostView):
    """POST: generate the month's charges once; answer 303, 409, 400, 503, 502 or 429.

    A month outside the billing window is a 400; a month other than this one or the next
    first answers a confirmation page whose button posts again with ``confirm=yes``. A GET
    (a 409 page's address entered again, say) leads to the month's page, as the 409's way
    back does (where the retry started).
    """

    permission_required = GENERATE_PERMISSION
    operation = OPERATION

    def back_url(self, **kwargs) -> str:
        return reverse("charges:run", args=[self.organization.slug, kwargs["month"]])

    def run(self, request, **kwargs):
        month_of_address(kwargs["month"])  # 404 for another spelling of a month
        month = parse_billing_month(kwargs["month"])
        if needs_confirmation(month) and request.POST.get("confirm") != "yes":
            return render(
                request,
                "charges/confirm_month.html",
                {
                    "organization": self.organization,
                    "month": month,
                    "month_label": month_label(month),
                    "question": answers.confirm_month(month),
                },
            )
        return generate_monthly_charges(month=month, **self.caller(request))
