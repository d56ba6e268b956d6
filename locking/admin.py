from django.contrib import admin

from locking.models import FenceEvent


class AuditTrailAdmin(admin.ModelAdmin):
    """An audit table spans tenants: superusers read it (and prune it); nobody edits it."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser


@admin.register(FenceEvent)
class FenceEventAdmin(AuditTrailAdmin):
    """The audit trail is read-only, and visible to superusers only (it spans tenants)."""

    list_display = ["at", "resource", "token", "outcome", "operation", "actor", "ip"]
    list_filter = ["outcome", "operation"]
    search_fields = ["resource", "actor", "detail"]
    date_hierarchy = "at"
