from django.contrib import admin

from hoa.admin_mixins import TenantAdminMixin
from vendors.models import Vendor, VendorAssignment, VendorContract


class VendorContractInline(admin.TabularInline):
    model = VendorContract
    extra = 0


@admin.register(Vendor)
class VendorAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "trade", "email"]
    search_fields = ["name", "trade"]
    inlines = [VendorContractInline]


@admin.register(VendorContract)
class VendorContractAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["vendor", "organization", "starts_on", "ends_on"]
    list_filter = ["organization"]
    search_fields = ["vendor__name"]
    list_select_related = ["vendor", "organization"]


@admin.register(VendorAssignment)
class VendorAssignmentAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["complaint", "vendor", "active", "fence_token", "assigned_at", "actor_label"]
    list_filter = ["active", "complaint__organization"]
    search_fields = ["complaint__title", "vendor__name"]
    list_select_related = ["complaint", "vendor"]
    readonly_fields = [f.name for f in VendorAssignment._meta.fields]

    def has_add_permission(self, request):
        return False  # assignments are made by the fenced service only

    def has_change_permission(self, request, obj=None):
        return False
