from django.contrib import admin

from hoa.admin_mixins import TenantAdminMixin
from hoa.models import Complaint, ComplaintEvent, Notice, Organization, StaffMembership, Unit


class UnitInline(admin.TabularInline):
    model = Unit
    extra = 0
    fields = ["label", "monthly_assessment"]


@admin.register(Organization)
class OrganizationAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "slug", "sla_hours_high", "sla_hours_normal", "sla_hours_low"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}

    def get_queryset(self, request):
        return Organization.objects.for_user(request.user)


@admin.register(Unit)
class UnitAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["label", "organization", "monthly_assessment"]
    list_filter = ["organization"]
    search_fields = ["label", "organization__name"]
    list_select_related = ["organization"]


@admin.register(StaffMembership)
class StaffMembershipAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["user", "organization", "created_at"]
    list_filter = ["organization"]
    search_fields = ["user__username", "organization__name"]
    list_select_related = ["user", "organization"]


class ComplaintEventInline(admin.TabularInline):
    model = ComplaintEvent
    extra = 0
    can_delete = False
    readonly_fields = ["kind", "detail", "at"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Complaint)
class ComplaintAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["id", "title", "organization", "unit", "status", "priority", "sla_due_at"]
    list_filter = ["status", "priority", "organization"]
    search_fields = ["title", "description", "unit__label"]
    list_select_related = ["organization", "unit"]
    readonly_fields = ["last_fence_token", "sla_breached_at"]
    inlines = [ComplaintEventInline]


@admin.register(Notice)
class NoticeAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["title", "organization", "publish_at", "published_at"]
    list_filter = ["organization"]
    search_fields = ["title", "body"]
    readonly_fields = ["published_at"]
