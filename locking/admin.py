"""The audit trail's admin, and the operators' action that breaks a stuck lease."""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from locking.conf import setting
from locking.exceptions import LockUnavailable
from locking.lock import FenceLock
from locking.models import FenceEvent
from locking.operators import BreakLeaseForm, holder_of

BREAK_PERMISSION = "locking.break_lease"
APPLY_FIELD = "apply"


def _breakable(name: str):
    """``name`` escaped, with a line-break opportunity after each colon."""
    return mark_safe(escape(name).replace(":", ":<wbr>"))  # noqa: S308 - escaped first


@admin.register(FenceEvent)
class FenceEventAdmin(admin.ModelAdmin):
    """The audit trail is read-only. It spans tenants, so it is shown to superusers and
    to users given ``locking.view_fenceevent`` or ``locking.break_lease`` (operators, who
    need it to decide which lease to break). Nobody deletes events here, superusers
    included: ``prune_fence_events`` removes them after their retention."""

    # The operation is the resource's prefix (and a filter): no column of its own, so the
    # list fits beside the filters at 1280 px.
    list_display = ["at", "resource_name", "token", "outcome", "actor_name", "ip"]
    list_filter = ["outcome", "operation"]
    search_fields = ["resource", "actor", "detail"]
    date_hierarchy = "at"
    actions = ["break_leases"]

    @admin.display(description=gettext_lazy("resource"), ordering="resource")
    def resource_name(self, event: FenceEvent):
        """The resource with a line-break opportunity after each colon: a narrow column
        wraps ``monthly-charges:org:3:`` / ``2026-12`` between its parts, never inside one."""
        return _breakable(event.resource)

    @admin.display(description=gettext_lazy("actor"), ordering="actor")
    def actor_name(self, event: FenceEvent):
        return _breakable(event.actor) or "-"

    def get_queryset(self, request):
        # The audit is written to the lock's database (Django's multi-database admin recipe).
        return super().get_queryset(request).using(setting("LOCK_DATABASE"))

    def has_module_permission(self, request):
        return self._may_view(request.user)

    def has_view_permission(self, request, obj=None):
        return self._may_view(request.user)

    @staticmethod
    def _may_view(user) -> bool:
        return user.is_active and (
            user.is_superuser
            or user.has_perm("locking.view_fenceevent")
            or user.has_perm(BREAK_PERMISSION)
        )

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        # The audit is not edited or deleted by hand, by superusers either:
        # prune_fence_events removes events past LOCK_FENCE_EVENT_RETENTION_DAYS.
        return False

    def has_break_lease_permission(self, request) -> bool:
        """Whether the action is offered: the ``permissions=["break_lease"]`` hook."""
        return request.user.is_active and request.user.has_perm(BREAK_PERMISSION)

    @admin.action(
        description=gettext_lazy("Break the lease of the selected resources"),
        permissions=["break_lease"],
    )
    def break_leases(self, request, queryset):
        """Show each selected resource's holder and ask why; on confirmation, break them."""
        scopes: dict[str, str] = {}
        for resource, scope in queryset.order_by().values_list("resource", "scope").distinct():
            scopes[resource] = scopes.get(resource) or scope
        lock = FenceLock()
        data = request.POST if APPLY_FIELD in request.POST else None
        form = BreakLeaseForm(data, resource_field=False)  # the selection names the resources
        if form.is_valid():
            for resource in sorted(scopes):
                self._break_one(request, lock, resource, scopes[resource], form)
            return None  # back to the changelist, which shows the messages
        try:
            holders = [(resource, holder_of(resource, lock=lock)) for resource in sorted(scopes)]
        except LockUnavailable as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request,
            "admin/locking/fenceevent/break_lease.html",
            {
                **self.admin_site.each_context(request),
                "title": _("Break the lease of the selected resources"),
                "subtitle": None,
                "opts": self.model._meta,
                "holders": holders,
                "selected": queryset.values_list("pk", flat=True),
                "form": form,
                "action_name": "break_leases",
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "apply_field": APPLY_FIELD,
                "media": self.media,
            },
        )

    def _break_one(self, request, lock: FenceLock, resource: str, scope: str, form) -> None:
        try:
            broken = form.break_lease(request, resource, scope=scope, lock=lock)
        except LockUnavailable as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        if broken is None:
            message = _("%(resource)s had no lease to break.") % {"resource": resource}
            self.message_user(request, message, messages.WARNING)
            return
        message = _("Broke the lease of %(holder)s on %(resource)s (token %(token)s).") % {
            "holder": broken.label or broken.owner,
            "resource": resource,
            "token": broken.token,
        }
        self.message_user(request, message, messages.SUCCESS)
