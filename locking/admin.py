"""The audit trail's admin, the current holders, and the operators' hand on a stuck lease.

Every page and action here shows and touches only what the viewer may see
(``LOCK_SCOPES_CALLABLE``, see locking/operators.py): the attempts listed, searched,
filtered, opened and their history; the holders; the leases broken, from the audit's
action or by resource name. What another scope holds is answered as if it did not exist.
"""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from locking.conf import setting
from locking.exceptions import LockUnavailable
from locking.keys import validate_resource
from locking.lock import FenceLock
from locking.models import FenceEvent, LeaseHolder
from locking.operators import (
    NOTHING_SHOWN,
    BreakLeaseForm,
    HolderChanged,
    HolderInfo,
    ShownLease,
    ViewerScopes,
    broken_message,
    changed_message,
    holder_of,
    holders,
    viewer_scopes,
)

BREAK_PERMISSION = "locking.break_lease"
APPLY_FIELD = "apply"
# The action's confirmation posts back each lease it showed: ``<token>|<owner>|<resource>``.
SHOWN_FIELD = "shown"
# The holders page scans at most this many leases (SCAN, never KEYS); leases live while
# an operation runs, so far fewer are held at once.
HOLDER_SCAN_LIMIT = 1000


def _breakable(name: str):
    """``name`` escaped, with a line-break opportunity after each colon."""
    return mark_safe(escape(name).replace(":", ":<wbr>"))  # noqa: S308 - escaped first


@admin.register(FenceEvent)
class FenceEventAdmin(admin.ModelAdmin):
    """The audit trail is read-only. It is shown to superusers and to users given
    ``locking.view_fenceevent`` or ``locking.break_lease`` (operators, who need it to
    decide which lease to break), each seeing the scopes ``LOCK_SCOPES_CALLABLE`` allows.
    Nobody deletes events here, superusers included: ``prune_fence_events`` removes them
    after their retention."""

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

    def get_urls(self):
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view
        # Before the model's own: "<path:object_id>/" would take them for an event's id.
        return [
            path("holders/", view(self.holders_view), name=f"{prefix}_holders"),
            path("holders/break/", view(self.break_view), name=f"{prefix}_break"),
            *super().get_urls(),
        ]

    def get_queryset(self, request):
        # The audit is written to the lock's database (Django's multi-database admin
        # recipe). Every page of it (the list, its filters, search and dates, an event, its
        # history, the action's selection) starts here: scoped once, scoped everywhere.
        events = super().get_queryset(request).using(setting("LOCK_DATABASE"))
        return self._scopes(request).events(events)

    @staticmethod
    def _scopes(request, resources=()) -> ViewerScopes:
        """The viewer's scopes, asked once per request (and again for named resources)."""
        if resources:
            return viewer_scopes(request.user, resources)
        if not hasattr(request, "_locking_scopes"):
            request._locking_scopes = viewer_scopes(request.user)
        return request._locking_scopes

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

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "holders_url": self._url("holders")}
        return super().changelist_view(request, extra_context)

    def _url(self, name: str) -> str:
        opts = self.opts
        return reverse(
            f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_{name}",
            current_app=self.admin_site.name,
        )

    def _context(self, request, title: str, **extra) -> dict:
        request.current_app = self.admin_site.name
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "subtitle": None,
            "opts": self.opts,
            "media": self.media,
            **extra,
        }

    # -- the audit's action --------------------------------------------------------------

    @admin.action(
        description=gettext_lazy("Break the lease of the selected resources"),
        permissions=["break_lease"],
    )
    def break_leases(self, request, queryset):
        """Show each selected resource's holder and ask why; on confirmation, break them."""
        selected = sorted(set(queryset.order_by().values_list("resource", flat=True)))
        scopes = self._scopes(request, selected)
        resources = [resource for resource in selected if scopes.may_see(resource)]
        if not selected:  # what was posted is nothing this viewer may see
            message = _("None of the selected attempts is one you may see: nothing was done.")
            self.message_user(request, message, messages.WARNING)
        for resource in selected:
            if not scopes.may_see(resource):  # an event of a scope the resource is not in
                message = _("The lease on %(resource)s is not one you may break.")
                self.message_user(request, message % {"resource": resource}, messages.ERROR)
        if not resources:
            return None
        lock = FenceLock()
        data = request.POST if APPLY_FIELD in request.POST else None
        form = BreakLeaseForm(data, resource_field=False)  # the selection names the resources
        if form.is_valid():
            shown = shown_leases(request.POST.getlist(SHOWN_FIELD))
            for resource in resources:
                scope = scopes.scope_of(resource)
                lease = shown.get(resource, NOTHING_SHOWN)
                self._break_one(request, lock, resource, scope, form, lease)
            return None  # back to the changelist, which shows the messages
        try:
            rows = [(resource, holder_of(resource, lock=lock)) for resource in resources]
        except LockUnavailable as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        title = _("Break the lease of the selected resources")
        context = self._context(
            request,
            title,
            holders=rows,
            selected=queryset.values_list("pk", flat=True),
            form=form,
            action_name="break_leases",
            action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
            apply_field=APPLY_FIELD,
            shown_field=SHOWN_FIELD,
        )
        return TemplateResponse(request, "admin/locking/fenceevent/break_lease.html", context)

    def _break_one(
        self, request, lock: FenceLock, resource: str, scope: str, form, shown: ShownLease
    ) -> bool:
        """Break ``resource``'s lease if it is still the one ``shown`` and say what came of
        it; False when Redis is down."""
        try:
            broken = form.break_lease(request, resource, shown=shown, scope=scope, lock=lock)
        except LockUnavailable as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return False
        except HolderChanged as changed:
            self.message_user(request, changed_message(changed), messages.WARNING)
            return True
        if broken is None:
            message = _("%(resource)s had no lease to break.") % {"resource": resource}
            self.message_user(request, message, messages.WARNING)
            return True
        self.message_user(request, broken_message(broken), messages.SUCCESS)
        return True

    # -- the holders, and breaking a lease by its resource name --------------------------

    def holders_view(self, request):
        """The leases held now that the viewer may see, each with its holder, token, time
        left and state; a lease whose resource has no audit row yet (a first-ever holder)
        is listed too: the list is read from Redis, not from the audit."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        leases: list[HolderInfo] = []
        error = ""
        truncated = False
        try:
            found = holders(limit=HOLDER_SCAN_LIMIT)
        except LockUnavailable as exc:
            error = exc.reason
        else:
            truncated = len(found) >= HOLDER_SCAN_LIMIT
            scopes = self._scopes(request, [holder.resource for holder in found])
            leases = [holder for holder in found if scopes.may_see(holder.resource)]
        context = self._context(
            request,
            _("Leases held now"),
            holders=leases,
            error=error,
            truncated=truncated,
            can_break=self.has_break_lease_permission(request),
            break_url=self._url("break"),
            changelist_url=self._url("changelist"),
        )
        return TemplateResponse(
            request,
            "admin/locking/fenceevent/holders.html",
            context,
            status=503 if error else 200,
        )

    def break_view(self, request):
        """Break the lease of one resource named by ``?resource=`` (GET names its holder and
        asks why; POST with the reason breaks it if it is still the lease the page showed),
        whether or not it has an audit row. Another scope's resource is a 404, as on the
        holders page."""
        if not self.has_break_lease_permission(request):
            raise PermissionDenied
        posted = request.method == "POST"
        data = request.POST if posted else request.GET
        resource = data.get("resource", "")
        form = BreakLeaseForm(request.POST if posted else None, initial={"resource": resource})
        try:
            validate_resource(resource)
        except ValueError as exc:
            return self._break_page(request, form, resource, problem=str(exc), status=400)
        scopes = self._scopes(request, [resource])
        if not scopes.may_see(resource):
            raise Http404
        lock = FenceLock()
        if posted and form.is_valid():
            shown = ShownLease(token=form.cleaned_data["token"], owner=form.cleaned_data["owner"])
            if self._break_one(request, lock, resource, scopes.scope_of(resource), form, shown):
                return HttpResponseRedirect(self._url("holders"))
            return self._break_page(request, form, resource, status=503)
        try:
            holder = holder_of(resource, lock=lock)
        except LockUnavailable as exc:
            return self._break_page(request, form, resource, problem=exc.reason, status=503)
        if holder is not None:  # the lease this page shows is the one a POST breaks
            form = BreakLeaseForm.shown(holder, request.POST if posted else None)
        status = 400 if posted else 200  # posted without a reason
        return self._break_page(request, form, resource, holder=holder, status=status)

    def _break_page(self, request, form, resource, *, holder=None, problem="", status=200):
        context = self._context(
            request,
            _("Break a lease"),
            form=form,
            resource=resource,
            holders=[(resource, holder)],
            problem=problem,
            holders_url=self._url("holders"),
            changelist_url=self._url("changelist"),
        )
        return TemplateResponse(
            request, "admin/locking/fenceevent/break.html", context, status=status
        )


def shown_leases(values: list[str]) -> dict[str, ShownLease]:
    """The leases the action's confirmation showed, by resource (``SHOWN_FIELD``)."""
    shown = {}
    for value in values:
        token, _sep, rest = value.partition("|")
        owner, _sep, resource = rest.partition("|")
        if resource and (token == "" or token.isdigit()):
            shown[resource] = ShownLease(token=int(token) if token else None, owner=owner)
    return shown


@admin.register(LeaseHolder)
class LeaseHolderAdmin(admin.ModelAdmin):
    """The admin index's line "Leases held now": its only page is the holders page of
    ``FenceEventAdmin``, for whoever may see the audit (the same permissions)."""

    def get_urls(self):
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view(self.changelist_view)
        return [path("", view, name=f"{prefix}_changelist")]

    def changelist_view(self, request, extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:locking_fenceevent_holders"))

    def has_module_permission(self, request):
        return FenceEventAdmin._may_view(request.user)

    def has_view_permission(self, request, obj=None):
        return FenceEventAdmin._may_view(request.user)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
