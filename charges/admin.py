from django.contrib import admin

from charges.admin_actions import generate_charges_for_month, has_generate_charges_permission
from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.admin import OrganizationAdmin
from hoa.admin_mixins import TenantAdminMixin

# "Generate charges for a month…" on Organization. hoa must not import charges, so the
# charges app extends hoa's admin class (imports run charges → hoa) instead of re-registering
# it. The action's permissions=["generate_charges"] looks up has_generate_charges_permission.
OrganizationAdmin.actions = [*(OrganizationAdmin.actions or []), generate_charges_for_month]
OrganizationAdmin.has_generate_charges_permission = has_generate_charges_permission


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
