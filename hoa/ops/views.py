"""Operators' pages: the lock status page, breaking a stuck lease, the health probes."""

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import DatabaseError, connection
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.generic import TemplateView
from django_htmx.http import HttpResponseClientRedirect
from redis.exceptions import RedisError

from hoa.answers.table import error_page, see_other
from hoa.models import scope_for_organization
from hoa.operations import ResourceInfo, describe_resources, operations
from hoa.ops.lockstatus import EVENTS_PER_PAGE as LOCK_EVENTS_PER_PAGE
from hoa.ops.lockstatus import (
    EventFilterForm,
    Viewer,
    fence_counters,
    resource_timeline,
    visible_holders,
)
from hoa.ops.readiness import pending_migrations
from hoa.paging import clamped_page
from hoa.security.audit import Reason, deny_request
from hoa.security.permissions import allow_methods, is_operator
from locking import FenceLock, LockUnavailable
from locking.keys import validate_resource
from locking.operators import BreakLeaseForm, HolderChanged, holder_of


class LockStatusView(LoginRequiredMixin, TemplateView):
    """Current lease holders, fence counters and the audit trail, limited to the user's orgs.

    An htmx request targeting ``#holders`` gets only the holders table (the page polls it).
    """

    template_name = "hoa/locks.html"
    holders_template_name = "hoa/_lock_holders.html"
    refresh_seconds = 5

    def handle_no_permission(self):
        if self.request.htmx:
            # A poll after the session ended: send the whole page to the login form
            # instead of swapping the login page into the holders table.
            response = super().handle_no_permission()
            return HttpResponseClientRedirect(response["Location"])
        return super().handle_no_permission()

    def dispatch(self, request, *args, **kwargs):
        # Leases, tokens and fenced attempts are the operators' (hoa.security.permissions):
        # office staff are answered 403, audited.
        if request.user.is_authenticated and not is_operator(request.user):
            deny_request(request, reason=Reason.PERMISSION, note="lock status: not an operator")
            raise PermissionDenied
        return super().dispatch(request, *args, **kwargs)

    def get(self, request, *args, **kwargs):
        self.viewer = Viewer.of(request.user)
        self.lock = FenceLock()
        self.form = EventFilterForm(request.GET)
        if request.htmx and request.htmx.target == "holders":
            response = render(request, self.holders_template_name, self.holders_context())
        else:
            response = self.render_to_response(self.get_context_data(**kwargs))
            if not self.form.is_valid():
                response.status_code = 400
        # The same URL answers a full page or a fragment: caches must keep both apart.
        patch_vary_headers(response, ("HX-Request",))
        return response

    def holders_context(self) -> dict:
        return {
            "holders": visible_holders(self.viewer, lock=self.lock),
            "now": timezone.now(),
            "refresh_seconds": self.refresh_seconds,
            "can_break": self.request.user.has_perm(BREAK_PERMISSION),
        }

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update(self.holders_context())
        context.update(
            form=self.form,
            resource_example=next((op.example for op in operations() if op.example), ""),
        )
        if not self.form.is_valid():
            return context
        events = self.form.filter(self.viewer.events())
        paginator = Paginator(events, LOCK_EVENTS_PER_PAGE)
        page = clamped_page(paginator, self.form.cleaned_data["page"] or 1)
        resource = self.form.cleaned_data["resource"]
        leases = context["holders"].leases
        resources = [resource] if resource else []
        resources += [holder.resource for holder in leases]
        resources += [event.resource for event in page.object_list]
        counters, counter_error = fence_counters(self.viewer, resources, lock=self.lock)
        query = self.request.GET.copy()
        query.pop("page", None)
        context.update(
            page=page,
            query=query.urlencode(),
            event_info=describe_resources(event.resource for event in page.object_list),
            counters=counters,
            counter_error=counter_error,
            resource=resource,
        )
        if resource:
            holder = next((h for h in leases if h.resource == resource), None)
            context["timeline"] = resource_timeline(self.viewer, resource, holder=holder)
        return context


# -- health probes (JSON, for load balancers) --------------------------------------------


@never_cache
@allow_methods("GET", "HEAD")
def healthz(request):
    """The process is up and serving."""
    return JsonResponse({"status": "ok"})


@never_cache
@allow_methods("GET", "HEAD")
def readyz(request):
    """PostgreSQL and Redis are reachable and every migration is applied."""
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
        pending = pending_migrations()
        checks["migrations"] = "ok" if not pending else f"{pending} pending"
    except DatabaseError as exc:
        checks["database"] = f"error: {exc.__class__.__name__}"
    try:
        FenceLock().client.ping()
        checks["redis"] = "ok"
    except (RedisError, LockUnavailable) as exc:
        checks["redis"] = f"error: {exc.__class__.__name__}"
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ready" if ready else "not ready", "checks": checks},
        status=200 if ready else 503,
    )


# -- breaking a stuck lease ------------------------------------------------------------------

BREAK_PERMISSION = "locking.break_lease"


class BreakLeaseView(LoginRequiredMixin, TemplateView):
    """Break a stuck lease: GET asks for a reason naming the holder, POST breaks it if it is
    still the lease the page showed (its token and owner ride in hidden fields).

    Safe because the fence is: the next holder's token is larger, so once it commits, the
    broken holder's late write is refused (docs/locking/operating.md, "Breaking a stuck
    lease"). A lease granted since the page was drawn is not the one the operator judged
    stuck: nothing is broken, and a 409 names who holds it now, with the form to break
    that one instead. Needs ``locking.break_lease`` (403 without, recorded); a resource the
    viewer may not see is a 404, as on the lock status page.
    """

    template_name = "hoa/break_lease.html"

    def dispatch(self, request, *args, **kwargs):
        if request.user.is_authenticated and not request.user.has_perm(BREAK_PERMISSION):
            deny_request(request, reason=Reason.PERMISSION, note=f"lacks {BREAK_PERMISSION}")
            raise PermissionDenied
        return super().dispatch(request, *args, **kwargs)

    def get(self, request, *args, **kwargs):
        form = BreakLeaseForm(initial={"resource": request.GET.get("resource", "")})
        return self.answer(form, request.GET.get("resource", ""))

    def post(self, request, *args, **kwargs):
        form = BreakLeaseForm(request.POST)
        resource = request.POST.get("resource", "")
        if not form.is_valid():
            return self.answer(form, resource, status=400)
        info = self.visible(form.cleaned_data["resource"])
        try:
            broken = form.break_lease(
                request,
                info.resource,
                scope=scope_for_organization(info.organization) if info.organization else "",
            )
        except LockUnavailable as exc:
            return error_page(
                request, 503, _("Lock service unavailable"), _("Redis cannot be reached: %s") % exc
            )
        except HolderChanged as changed:
            form = BreakLeaseForm.shown(changed.holder, request.POST)
            context = self.get_context_data(
                form=form, info=info, holder=changed.holder, changed=changed
            )
            return self.render_to_response(context, status=409)
        if broken is None:
            messages.info(request, _("Nothing to break: the lease had already ended."))
        else:
            messages.success(
                request,
                _("The lease of %(holder)s (token %(token)s) is broken.")
                % {"holder": broken.label or broken.owner, "token": broken.token},
            )
        url = f"{reverse('hoa:locks')}?{urlencode({'resource': info.resource})}"
        return see_other(url)

    def visible(self, resource: str) -> ResourceInfo:
        info = describe_resources([resource])[resource]
        if not Viewer.of(self.request.user).may_see_resource(info):
            raise Http404
        return info

    def answer(self, form, resource: str, status: int = 200):
        info = holder = None
        error = ""
        try:
            validate_resource(resource)
        except ValueError:
            status = 400
        else:
            info = self.visible(resource)
            try:
                holder = holder_of(resource)
            except LockUnavailable as exc:
                error = exc.reason
        if holder is not None:  # the lease shown is the one a POST breaks
            form = BreakLeaseForm.shown(holder, form.data if form.is_bound else None)
            if status != 200:
                form.is_valid()  # a re-shown form keeps its errors (the reason's)
        context = self.get_context_data(form=form, info=info, holder=holder, error=error)
        return self.render_to_response(context, status=status)
