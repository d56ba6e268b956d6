"""Staff pages of the hoa app: organizations, dashboard, lock status, health probes, errors."""

from datetime import timedelta

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.db import DatabaseError, connection
from django.db.models import Count, Q
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template import loader
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import requires_csrf_token
from django.views.generic import ListView, TemplateView
from django_htmx.http import HttpResponseClientRedirect
from redis.exceptions import RedisError

from hoa.access import OrganizationMixin
from hoa.charts import Bar, bar_chart
from hoa.lockstatus import EVENTS_PER_PAGE as LOCK_EVENTS_PER_PAGE
from hoa.lockstatus import (
    EventFilterForm,
    Viewer,
    describe_resources,
    fence_counters,
    operations_seen,
    resource_timeline,
    visible_holders,
)
from hoa.models import Complaint, Organization
from hoa.readiness import pending_migrations
from hoa.responses import error_page
from hoa.scopes import scope_for_organization
from hoa.security import Reason, deny_request
from locking import FenceLock, LockUnavailable, Outcome
from locking.models import FenceEvent

# How far back the dashboard's "fenced attempts" chart looks.
ATTEMPTS_WINDOW = timedelta(days=30)
# Axis labels short enough to sit under a bar; the full outcome name is in the tooltip.
SHORT_OUTCOME_LABELS = {
    Outcome.COMMITTED: gettext_lazy("committed"),
    Outcome.ALREADY_DONE: gettext_lazy("already done"),
    Outcome.CONFLICT: gettext_lazy("changed"),
    Outcome.STALE: gettext_lazy("stale"),
    Outcome.BUSY: gettext_lazy("busy"),
    Outcome.FAILED: gettext_lazy("failed"),
    Outcome.UNAVAILABLE: gettext_lazy("Redis down"),
    Outcome.DENIED: gettext_lazy("denied"),
    Outcome.LOST: gettext_lazy("lease lost"),
    Outcome.BROKEN: gettext_lazy("broken"),
}


def home(request):
    if not request.user.is_authenticated:
        return redirect("login")
    return redirect("hoa:organizations")


def _first_of_this_month():
    return timezone.localdate().replace(day=1)


class OrganizationListView(LoginRequiredMixin, ListView):
    """The associations the user is staff of, each with its numbers at a glance."""

    template_name = "hoa/organization_list.html"
    context_object_name = "organizations"

    def get_queryset(self):
        month = _first_of_this_month()
        open_ = Q(complaints__status__in=Complaint.OPEN_STATUSES)
        return Organization.objects.for_user(self.request.user).annotate(
            unit_count=Count("units", distinct=True),
            open_count=Count("complaints", filter=open_, distinct=True),
            breached_count=Count(
                "complaints",
                filter=open_ & Q(complaints__sla_breached_at__isnull=False),
                distinct=True,
            ),
            # 0 or 1: there is one run per organization and month.
            completed_run_count=Count(
                "charge_runs",
                filter=Q(charge_runs__month=month, charge_runs__status="completed"),
                distinct=True,
            ),
        )

    def get_context_data(self, **kwargs):
        return super().get_context_data(month=_first_of_this_month(), **kwargs)


class DashboardView(OrganizationMixin, TemplateView):
    """One association: units, open complaints, SLA breaches, this month's charges."""

    template_name = "hoa/dashboard.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        org = self.organization
        month = _first_of_this_month()
        complaints = Complaint.objects.for_organization(org)
        events = FenceEvent.objects.in_scopes([scope_for_organization(org)])
        context.update(
            month=month,
            unit_count=org.units.count(),
            open_complaints=complaints.open().count(),
            breached_complaints=complaints.open().breached().count(),
            current_run=org.charge_runs.filter(month=month).first(),
            can_generate=self.request.user.has_perm("charges.generate_charges"),
            urgent_complaints=complaints.open()
            .select_related("unit")
            .order_by("sla_breached_at", "sla_due_at")[:8],
            recent_events=self._recent(events),
            attempts_chart=self._attempts_chart(events),
        )
        return context

    @staticmethod
    def _recent(events) -> list:
        recent = list(events[:6])
        described = describe_resources(event.resource for event in recent)
        return [(event, described[event.resource]) for event in recent]

    @staticmethod
    def _attempts_chart(events):
        since = timezone.now() - ATTEMPTS_WINDOW
        counts = dict(
            events.filter(at__gte=since)
            .order_by()
            .values_list("outcome")
            .annotate(count=Count("pk"))
        )
        if not counts:
            return ""
        bars = [
            Bar(
                label=SHORT_OUTCOME_LABELS[outcome],
                value=counts.get(outcome, 0),
                title=f"{outcome.label}: {counts.get(outcome, 0)}",
                css_class=outcome.value,
            )
            for outcome in Outcome
        ]
        return bar_chart(
            bars,
            title=_("Fenced attempts in the last 30 days by outcome"),
            width=900,
            height=180,
        )


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
        context.update(form=self.form, operations=operations_seen(self.viewer))
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


# -- error pages ---------------------------------------------------------------------------


@requires_csrf_token
def bad_request(request, exception=None):
    return error_page(request, 400, _("Bad request"), _("The request could not be understood."))


@requires_csrf_token
def permission_denied(request, exception=None):
    if not getattr(request, "access_denial_recorded", False):
        # A refusal no view recorded itself: the admin's own permission checks, say.
        match = request.resolver_match
        view = match.view_name if match else request.path
        why = str(exception or "")
        deny_request(request, reason=Reason.PERMISSION, note=f"{view}: {why}" if why else view)
    return error_page(request, 403, _("Not allowed"), _("You do not have permission to do that."))


@requires_csrf_token
def page_not_found(request, exception=None):
    return error_page(
        request,
        404,
        _("Not found"),
        _("There is nothing here, or it belongs to an association you are not staff of."),
    )


def csrf_failure(request, reason=""):
    """The form was stale or came from elsewhere (CSRF_FAILURE_VIEW); audited."""
    deny_request(request, reason=Reason.CSRF, note=reason or "CSRF check failed")
    return error_page(
        request,
        403,
        _("This form has expired"),
        _("Go back, reload the page and submit the form again. Nothing was changed."),
    )


@never_cache
def too_many_requests(request, exception=None):
    """RATELIMIT_VIEW: the 429 page, saying when to try again; audited."""
    message = getattr(exception, "message", "") or _(
        "Too many requests in a short time; nothing was done. Try again in a minute."
    )
    retry_after = getattr(exception, "retry_after", 60)
    limit = getattr(exception, "limit", None)
    deny_request(
        request,
        reason=Reason.RATE_LIMIT,
        note=f"{limit.group} over {limit.rate}" if limit else "over a rate limit",
    )
    response = error_page(request, 429, _("Too many requests"), message)
    response["Retry-After"] = str(retry_after)
    return response


def server_error(request):
    """Render the 500 page without the request context: the database may be what failed."""
    template = loader.get_template("hoa/error.html")
    body = template.render(
        {
            "title": _("Something went wrong"),
            "message": _("The error was logged. Please try again in a moment."),
            "status": 500,
        }
    )
    return HttpResponse(body, status=500)
