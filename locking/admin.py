from django.contrib import admin

from locking.models import FenceEvent


@admin.register(FenceEvent)
class FenceEventAdmin(admin.ModelAdmin):
    """The audit trail is read-only, and visible to superusers only (it spans tenants);
    superusers may delete old events (``prune_fence_events`` is the usual way)."""

    list_display = ["at", "resource", "token", "outcome", "operation", "actor", "ip"]
    list_filter = ["outcome", "operation"]
    search_fields = ["resource", "actor", "detail"]
    date_hierarchy = "at"

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
