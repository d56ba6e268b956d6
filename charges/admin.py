"""The charges admin: runs and charges (read-only), and "Generate charges for a month…" on
the Organization changelist.

``hoa`` does not know about charges: this module adds the action to the Organization admin
(``hoa.admin_mixins.extend``), and the frame's admin offers it to users with the
operation's permission. It has the shape of Django's ``delete_selected``
(``hoa.admin_actions``): its first POST shows an intermediate page to choose the month; its
submit runs the service once per selected organization and reports each with the level its
answer deserves.
"""

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from charges.exceptions import InvalidMonth
from charges.forms import ConfirmedMonthForm, parse_month
from charges.models import MonthlyCharge, MonthlyChargeRun, month_label
from charges.operations import GENERATE_PERMISSION
from charges.selectors import current_month
from charges.services import generate_monthly_charges
from hoa.admin_actions import answer_each, applying, ask
from hoa.admin_mixins import AdminExtension, TenantAdminMixin, extend
from hoa.dates import month_name
from hoa.web.access import client_ip
from hoa.web.money import format_money


@admin.action(description=gettext_lazy("Generate charges for a month…"))
def generate_charges_for_month(modeladmin, request, queryset):
    """Ask for a month, then generate each selected organization's charges for it."""
    if applying(request):
        form = ConfirmedMonthForm(request.POST)
    else:
        form = ConfirmedMonthForm(initial={"month": month_label(current_month())})
    if form.is_bound and form.is_valid():
        month, ip = form.cleaned_data["month"], client_ip(request)
        answer_each(
            modeladmin,
            request,
            queryset,
            lambda organization: generate_monthly_charges(
                organization=organization, month=month, actor=request.user, ip=ip
            ),
        )
        return None  # back to the changelist, which shows the messages
    return ask(
        modeladmin,
        request,
        queryset,
        form,
        "charges/admin/generate_charges.html",
        title=_("Generate charges for a month"),
    )


# On the frame's Organization admin, for users with the operation's permission.
extend(
    AdminExtension(
        "hoa.Organization", permission=GENERATE_PERMISSION, actions=(generate_charges_for_month,)
    )
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
class MonthlyChargeRunAdmin(TenantAdminMixin, admin.ModelAdmin):
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

    # Runs are created by the fenced service only, and a completed run is final: no add,
    # no change, no delete (deleting would let a month be billed twice), no "Regenerate".
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MonthlyCharge)
class MonthlyChargeAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["run", "unit", "amount_with_currency"]
    list_filter = ["run__organization"]
    search_fields = ["unit__label"]
    list_select_related = ["run__organization", "unit"]
    fields = readonly_fields = ["run", "unit", "amount_with_currency", "created_at"]

    @admin.display(description=gettext_lazy("amount"), ordering="amount")
    def amount_with_currency(self, charge: MonthlyCharge) -> str:
        return format_money(charge.amount)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
