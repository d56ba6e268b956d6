"""Staff pages of the frame: organizations, an organization's dashboard, error pages."""

from datetime import timedelta

from django.contrib.auth.mixins import LoginRequiredMixin
from django.db.models import Count, Q
from django.http import HttpResponse
from django.shortcuts import redirect
from django.template import loader
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import requires_csrf_token
from django.views.generic import ListView, TemplateView

from hoa.answers.table import error_page
from hoa.charts import Bar, bar_chart
from hoa.complaints import selectors as complaints
from hoa.models import Complaint, Organization, scope_for_organization
from hoa.operations import Panel, describe_resources, every_pages
from hoa.security.audit import Reason, deny_request
from hoa.security.permissions import is_operator
from hoa.tenancy import OrganizationMixin
from locking import Outcome
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
    Outcome.UNKNOWN: gettext_lazy("not known yet"),
}


def home(request):
    """Where signing in lands: the one association of someone staff of one, else the list
    to pick from (a picker of one card every time is a click for nothing)."""
    if not request.user.is_authenticated:
        return redirect("login")
    only = Organization.objects.for_user(request.user).values_list("slug", flat=True)[:2]
    if len(only) == 1:
        return redirect("hoa:dashboard", only[0])
    return redirect("hoa:organizations")


def _panels() -> list[Panel]:
    return [pages.dashboard for pages in every_pages()]


def _first_of_this_month():
    return timezone.localdate().replace(day=1)


class OrganizationListView(LoginRequiredMixin, ListView):
    """The associations the user is staff of, each with its numbers at a glance."""

    template_name = "hoa/organization_list.html"
    context_object_name = "organizations"

    def get_queryset(self):
        open_ = Q(complaints__status__in=Complaint.OPEN_STATUSES)
        # Past the SLA as of this request, not as of the last sweep (``past_sla``).
        late = Q(complaints__sla_due_at__lt=timezone.now()) | Q(
            complaints__sla_breached_at__isnull=False
        )
        return Organization.objects.for_user(self.request.user).annotate(
            unit_count=Count("units", distinct=True),
            open_count=Count("complaints", filter=open_, distinct=True),
            breached_count=Count("complaints", filter=open_ & late, distinct=True),
            **{
                name: expression
                for panel in _panels()
                if panel.organization_annotations
                for name, expression in panel.organization_annotations().items()
            },
        )

    def get_context_data(self, **kwargs):
        return super().get_context_data(month=_first_of_this_month(), panels=_panels(), **kwargs)


class DashboardView(OrganizationMixin, TemplateView):
    """One association: its units, each fenced operation's panel, the recent attempts."""

    template_name = "hoa/dashboard.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        org = self.organization
        month = _first_of_this_month()
        events = FenceEvent.objects.in_scopes([scope_for_organization(org)])
        panels = _panels()
        for panel in panels:
            if panel.context is not None:
                context.update(panel.context(self.request, org))
        context.update(
            complaints.dashboard_context(org),
            month=month,
            panels=panels,
            unit_count=org.units.count(),
        )
        if is_operator(self.request.user):  # the fenced attempts are the operators' to read
            context.update(
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
