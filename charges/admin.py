from django.contrib import admin

from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.admin_mixins import TenantAdminMixin


@admin.register(MonthlyChargeRun)
class MonthlyChargeRunAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["organization", "month", "status", "charge_count", "total", "completed_at"]
    list_filter = ["status", "organization"]
    search_fields = ["organization__name"]
    list_select_related = ["organization"]
    readonly_fields = [f.name for f in MonthlyChargeRun._meta.fields]

    def has_add_permission(self, request):
        return False  # runs are created by the fenced service only

    def has_change_permission(self, request, obj=None):
        return False  # a completed run is final


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
