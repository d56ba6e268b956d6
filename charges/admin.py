"""The charges admin: runs and charges (read-only), and "Generate charges for a month…" on
the Organization changelist.

``hoa`` does not know about charges: ``GENERATION`` declares the action for the Organization
admin (``AdminExtension``), and the frame's admin offers it to users with the operation's
permission. It has the shape of Django's ``delete_selected`` (``hoa.admin_actions``): its
first POST shows an intermediate page to choose the month; its submit runs the service once
per selected organization and reports each with the level its answer deserves.
"""

from django.contrib import admin
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from charges.forms import ConfirmedMonthForm
from charges.models import MonthlyCharge, MonthlyChargeRun, month_label
from charges.selectors import current_month
from charges.services import generate_monthly_charges
from hoa.admin_actions import answer_each, applying, ask
from hoa.admin_mixins import TenantAdminMixin
from hoa.web.access import client_ip


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


@admin.register(MonthlyChargeRun)
class MonthlyChargeRunAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = [
        "organization",
        "month",
        "status",
        "charge_count",
        "total",
        "last_fence_token",
        "completed_at",
        "completed_by",
    ]
    list_filter = ["status", "organization"]
    search_fields = ["organization__name"]
    list_select_related = ["organization"]
    readonly_fields = [f.name for f in MonthlyChargeRun._meta.fields]

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
    list_display = ["run", "unit", "amount"]
    list_filter = ["run__organization"]
    search_fields = ["unit__label"]
    list_select_related = ["run__organization", "unit"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
