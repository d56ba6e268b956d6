"""The charges admin: runs and charges (read-only), and "Generate charges for a month…" on
the Organization changelist.

``hoa`` does not know about charges: this module adds the action to the Organization admin
(``hoa.admin_actions.fenced_action(extends=…)``), which offers it to users with the
operation's permission: its first POST asks for the month, its submit generates each
selected organization's charges.
"""

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.utils.translation import gettext_lazy

from charges.exceptions import InvalidMonth
from charges.forms import ConfirmedMonthForm, parse_month
from charges.models import MonthlyCharge, MonthlyChargeRun, month_label
from charges.operations import GENERATE_PERMISSION
from charges.selectors import current_month
from charges.services import generate_monthly_charges
from hoa.admin_actions import fenced_action
from hoa.admin_mixins import FencedRecordAdmin
from hoa.dates import month_name
from hoa.web.money import format_money

generate_charges_for_month = fenced_action(
    "generate_charges_for_month",
    ConfirmedMonthForm,
    lambda organization, data, **who: generate_monthly_charges(
        organization=organization, month=data["month"], **who
    ),
    description=gettext_lazy("Generate charges for a month…"),
    title=gettext_lazy("Generate charges for a month"),
    intro=gettext_lazy(
        "Generate the monthly charges of these organizations, one charge per unit. A month "
        "that is already generated is left as it is."
    ),
    submit=gettext_lazy("Generate charges"),
    initial=lambda: {"month": month_label(current_month())},
    extends="hoa.Organization",  # its admin offers it to users with the permission
    permission=GENERATE_PERMISSION,
)


class MonthFilter(admin.SimpleListFilter):
    """The runs' months, newest first, named for people ("December 2026"); ``YYYY-MM`` in
    the URL."""

    title = gettext_lazy("month")
    parameter_name = "month"

    def lookups(self, request, model_admin):
        months = (
            model_admin.get_queryset(request).order_by("-month").values_list("month", flat=True)
        )
        return [(month_label(month), month_name(month)) for month in months.distinct()]

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        try:
            month = parse_month(self.value())
        except InvalidMonth as exc:  # Django's answer to a bad filter: the list, "?e=1"
            raise IncorrectLookupParameters(str(self.value())) from exc
        return queryset.filter(month=month)


@admin.register(MonthlyChargeRun)
class MonthlyChargeRunAdmin(FencedRecordAdmin):
    # Runs are written by the fenced service only, and a completed run is final: no add,
    # no change, no delete (deleting would let a month be billed twice), no "Regenerate".
    list_display = [
        "organization",
        "month_name",
        "status",
        "charge_count",
        "total_amount",
        "last_fence_token",
        "completed_at",
        "completed_by",
    ]
    list_filter = ["status", MonthFilter, "organization"]
    search_fields = ["organization__name"]
    list_select_related = ["organization"]
    fields = readonly_fields = [
        "organization",
        "month_name",
        "status",
        "started_at",
        "completed_at",
        "completed_by",
        "charge_count",
        "total_amount",
        "last_fence_token",
    ]

    @admin.display(description=gettext_lazy("month"), ordering="month")
    def month_name(self, run: MonthlyChargeRun) -> str:
        return month_name(run.month)

    @admin.display(description=gettext_lazy("total"), ordering="total")
    def total_amount(self, run: MonthlyChargeRun) -> str:
        return format_money(run.total)


@admin.register(MonthlyCharge)
class MonthlyChargeAdmin(FencedRecordAdmin):
    list_display = ["run", "unit", "amount_with_currency"]
    list_filter = ["run__organization"]
    search_fields = ["unit__label"]
    list_select_related = ["run__organization", "unit"]
    fields = readonly_fields = ["run", "unit", "amount_with_currency", "created_at"]

    @admin.display(description=gettext_lazy("amount"), ordering="amount")
    def amount_with_currency(self, charge: MonthlyCharge) -> str:
        return format_money(charge.amount)
