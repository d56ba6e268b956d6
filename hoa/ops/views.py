"""Operators' pages: the lock status page and the health probes."""

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.db import DatabaseError, connection
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.cache import never_cache
from django.views.generic import TemplateView
from django_htmx.http import HttpResponseClientRedirect
from redis.exceptions import RedisError

from hoa.operations import describe_resources, operations
from hoa.ops.lockstatus import EVENTS_PER_PAGE as LOCK_EVENTS_PER_PAGE
from hoa.ops.lockstatus import (
    EventFilterForm,
    Viewer,
    fence_counters,
    operations_seen,
    resource_timeline,
    visible_holders,
)
from hoa.ops.readiness import pending_migrations
from locking import FenceLock, LockUnavailable


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
        }

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update(self.holders_context())
        context.update(
            form=self.form,
            operations=operations_seen(self.viewer),
            resource_example=next((op.example for op in operations() if op.example), ""),
        )
        if not self.form.is_valid():
            return context
        events = self.form.filter(self.viewer.events())
        page = Paginator(events, LOCK_EVENTS_PER_PAGE).get_page(self.form.cleaned_data["page"])
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
def healthz(request):
    """The process is up and serving."""
    return JsonResponse({"status": "ok"})


@never_cache
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
