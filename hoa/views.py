"""Staff pages of the hoa app: organizations, dashboard, lock status, health probes."""

from django.contrib.auth.mixins import LoginRequiredMixin
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.generic import ListView, TemplateView
from redis.exceptions import RedisError

from hoa.access import OrganizationMixin
from hoa.models import Complaint, Organization
from hoa.responses import error_page
from locking import FenceLock, LockUnavailable


def home(request):
    if not request.user.is_authenticated:
        return redirect("login")
    return redirect("hoa:organizations")


class OrganizationListView(LoginRequiredMixin, ListView):
    template_name = "hoa/organization_list.html"
    context_object_name = "organizations"

    def get_queryset(self):
        return Organization.objects.for_user(self.request.user)


class DashboardView(OrganizationMixin, TemplateView):
    template_name = "hoa/dashboard.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        org = self.organization
        today = timezone.localdate()
        complaints = Complaint.objects.for_organization(org)
        context.update(
            unit_count=org.units.count(),
            open_complaints=complaints.open().count(),
            breached_complaints=complaints.open().breached().count(),
            current_run=org.charge_runs.filter(month=today.replace(day=1)).first(),
            month=today.replace(day=1),
            recent_complaints=complaints.open().select_related("unit")[:5],
        )
        return context


class LockStatusView(LoginRequiredMixin, TemplateView):
    """Current lease holders and recent fenced attempts, limited to the user's orgs."""

    template_name = "hoa/locks.html"

    def get_context_data(self, **kwargs):
        from hoa.lockstatus import lock_status_context

        context = super().get_context_data(**kwargs)
        context.update(lock_status_context(self.request))
        return context


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
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        checks["database"] = "ok"
        checks["migrations"] = "ok" if not pending else f"{len(pending)} pending"
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


def bad_request(request, exception=None):
    return error_page(request, 400, _("Bad request"), _("The request could not be understood."))


def permission_denied(request, exception=None):
    return error_page(request, 403, _("Not allowed"), _("You do not have permission to do that."))


def page_not_found(request, exception=None):
    return error_page(request, 404, _("Not found"), _("There is nothing here."))


def server_error(request):
    return error_page(
        request, 500, _("Something went wrong"), _("The error was logged. Please try again.")
    )
