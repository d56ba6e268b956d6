from datetime import datetime

from django.contrib import admin
from django.contrib.admin.widgets import AutocompleteSelect
from django.db.models import Q
from django.templatetags.static import static
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext_lazy as _

from hoa.admin_mixins import AuditTrailAdmin, ExtensibleAdmin, TenantAdminMixin
from hoa.models import (
    AccessDenial,
    Complaint,
    ComplaintEvent,
    Notice,
    Organization,
    OutsideCall,
    StaffMembership,
    Unit,
)
from hoa.web.fields import ADMIN_FORMFIELDS
from hoa.web.money import format_money


class UnitInline(admin.TabularInline):
    model = Unit
    extra = 0
    fields = ["label", "monthly_assessment"]
    formfield_overrides = ADMIN_FORMFIELDS


@admin.register(Organization)
class OrganizationAdmin(ExtensibleAdmin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "slug", "sla_hours_high", "sla_hours_normal", "sla_hours_low"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Unit)
class UnitAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["label", "organization", "assessment"]
    list_filter = ["organization"]
    search_fields = ["label", "organization__name"]
    list_select_related = ["organization"]

    @admin.display(description=_("monthly assessment"), ordering="monthly_assessment")
    def assessment(self, unit: Unit) -> str:
        return format_money(unit.monthly_assessment)

    def get_readonly_fields(self, request, obj=None):
        # A unit never moves to another association (hoa 0005): the rows that name it
        # stay that association's.
        readonly = super().get_readonly_fields(request, obj)
        return [*readonly, "organization"] if obj is not None else readonly

    def get_search_results(self, request, queryset, search_term):
        """The complaint's unit autocomplete asks for one association's units only
        (``UnitOfOrganizationSelect``)."""
        queryset, distinct = super().get_search_results(request, queryset, search_term)
        organization = request.GET.get("organization", "")
        if organization.isascii() and organization.isdigit():
            queryset = queryset.filter(organization_id=int(organization))
        return queryset, distinct


class UnitOfOrganizationSelect(AutocompleteSelect):
    """The unit autocomplete of a complaint that has its association: that one's units."""

    def __init__(self, field, admin_site, *, organization_id: int):
        super().__init__(field, admin_site)
        self.organization_id = organization_id

    def get_url(self):
        return f"{super().get_url()}?organization={int(self.organization_id)}"


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
    fields = readonly_fields = [
        "at",
        "kind",
        "from_status",
        "to_status",
        "old_due_at",
        "new_due_at",
        "actor_label",
        "detail",
    ]
    ordering = ["-at", "-id"]

    def has_add_permission(self, request, obj=None):
        return False


def humanize_due_in(due_at: datetime, now: datetime) -> str:
    """Return how long until ``due_at``, e.g. "3 hours, 5 minutes", or "overdue by 6 hours"."""
    if due_at >= now:
        return timeuntil(due_at, now, depth=2)
    return _("overdue by %(overdue_by)s") % {"overdue_by": timesince(due_at, now, depth=2)}


class BreachedFilter(admin.SimpleListFilter):
    """Past the SLA as of now (``ComplaintQuerySet.past_sla``), whether or not the sweep
    has recorded it yet."""

    title = _("SLA")
    parameter_name = "breached"

    def lookups(self, request, model_admin):
        return [("yes", _("Past SLA")), ("no", _("Not past SLA"))]

    def queryset(self, request, queryset):
        late = Complaint.objects.past_sla().values("pk")
        if self.value() == "yes":
            return queryset.filter(pk__in=late)
        if self.value() == "no":
            return queryset.exclude(pk__in=late)
        return queryset


@admin.register(Complaint)
class ComplaintAdmin(ExtensibleAdmin, TenantAdminMixin, admin.ModelAdmin):
    # Six columns that fit beside the filters at 1280 px: "#12 title" (the link), the
    # association, the unit's label (its association is the column before), status,
    # priority, and the SLA as of now in words, with the warning icon only when it is past.
    list_display = ["__str__", "organization", "unit_label", "status", "priority", "sla"]
    list_filter = ["status", "priority", BreachedFilter, "organization"]
    search_fields = ["title", "description", "unit__label"]
    list_select_related = ["organization", "unit"]
    # The SLA clock is not edited by hand: changing it is a recorded action with a reason
    # (the complaint page's "Change the SLA", hoa.complaints.change_sla). The status moves
    # through the workflow's rules (hoa.complaints.change_status) on the same page.
    readonly_fields = [
        "status",
        "opened_at",
        "sla_due_at",
        "sla_breached_at",
        "closed_at",
        "closed_by",
        "last_fence_token",
    ]
    inlines = [ComplaintEventInline]
    autocomplete_fields = ["unit"]

    def has_delete_permission(self, request, obj=None):
        # A complaint is closed, never deleted (superusers included): its timeline is the
        # record of what happened, and it lives as long as the complaint.
        return False

    def get_form(self, request, obj=None, change=False, **kwargs):
        request.complaint_organization_id = obj.organization_id if obj is not None else None
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        # A complaint stays with its association (hoa 0005); closing it is the way out.
        readonly = super().get_readonly_fields(request, obj)
        return [*readonly, "organization"] if obj is not None else readonly

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        organization_id = getattr(request, "complaint_organization_id", None)
        if db_field.name == "unit" and organization_id is not None:
            # A complaint's unit is one of its association's: the menu offers no other.
            kwargs["queryset"] = Unit.objects.filter(organization_id=organization_id)
            kwargs["widget"] = UnitOfOrganizationSelect(
                db_field, self.admin_site, organization_id=organization_id
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description=_("unit"), ordering="unit__label")
    def unit_label(self, complaint: Complaint) -> str | None:
        return complaint.unit.label if complaint.unit_id else None

    @admin.display(description=_("SLA"), ordering="sla_due_at")
    def sla(self, complaint: Complaint):
        """The SLA as of now, not as of the last sweep: "due in 3 hours" while on time; past
        it (overdue, or a breach recorded), the admin's warning icon and "overdue by 6
        hours" in the error colour. A resolved or closed complaint has no clock: "-"."""
        if not complaint.is_open or complaint.sla_due_at is None:
            return None
        now = timezone.now()
        if not complaint.is_past_sla(now):
            return _("due in %(time_left)s") % {
                "time_left": humanize_due_in(complaint.sla_due_at, now)
            }
        if complaint.sla_due_at < now:
            text = humanize_due_in(complaint.sla_due_at, now)
        else:  # the breach was recorded, then the SLA moved
            text = _("breach recorded; due in %(time_left)s") % {
                "time_left": humanize_due_in(complaint.sla_due_at, now)
            }
        return format_html(
            '<span class="sla-past"><img src="{}" alt="{}" width="13" height="13"> {}</span>',
            static("admin/img/icon-alert.svg"),
            _("Past SLA:"),
            text,
        )


class PublishStateFilter(admin.SimpleListFilter):
    """The notice publisher's view of a notice: scheduled → due → published → delivered."""

    title = _("publish state")
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [
            ("scheduled", _("Scheduled")),
            ("due", _("Due (awaiting the publisher)")),
            ("published", _("Published, not yet delivered")),
            ("delivered", _("Delivered")),
        ]

    def queryset(self, request, queryset):
        now = timezone.now()
        conditions = {
            "scheduled": Q(published_at__isnull=True, publish_at__gt=now),
            "due": Q(published_at__isnull=True, publish_at__lte=now),
            "published": Q(published_at__isnull=False, delivered_at__isnull=True),
            "delivered": Q(delivered_at__isnull=False),
        }
        if self.value() in conditions:
            return queryset.filter(conditions[self.value()])
        return queryset


@admin.register(Notice)
class NoticeAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["title", "organization", "publish_at", "publish_state", "published_at"]
    list_filter = [PublishStateFilter, "organization"]
    search_fields = ["title", "body"]
    readonly_fields = ["published_at", "delivered_at"]

    @admin.display(description=_("publish state"), ordering="published_at")
    def publish_state(self, notice: Notice) -> str:
        if notice.delivered_at is not None:
            return _("Delivered")
        if notice.published_at is not None:
            return _("Published, not yet delivered")
        if notice.publish_at <= timezone.now():
            return _("Due (awaiting the publisher)")
        return _("Scheduled")


@admin.register(AccessDenial)
class AccessDenialAdmin(AuditTrailAdmin):
    """Refused requests and actions (``hoa.security.audit``): superusers only, read-only.

    They span associations (a refusal often *is* someone reaching into another one), so
    no association's staff reads them here.
    """

    list_display = ["at", "reason", "actor", "ip", "organization", "operation", "resource"]
    list_filter = ["reason", "operation", "organization"]
    search_fields = ["actor", "resource", "detail", "ip"]
    date_hierarchy = "at"
    list_select_related = ["organization"]


@admin.register(OutsideCall)
class OutsideCallAdmin(AuditTrailAdmin):
    """Outside calls whose outcome was not known (``hoa.jobs.settling``), settled or not:
    superusers read them; the settling job writes them."""

    list_display = [
        "recorded_at",
        "operation",
        "organization",
        "idempotency_key",
        "token",
        "reason",
        "tries",
        "settlement",
        "settled_at",
    ]
    list_filter = ["operation", "settlement", ("settled_at", admin.EmptyFieldListFilter)]
    search_fields = ["idempotency_key", "resource", "actor", "detail"]
    date_hierarchy = "recorded_at"
    list_select_related = ["organization"]
