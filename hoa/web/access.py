"""Who may see and act on what: the one view-side tenant check."""

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.utils import timezone

from hoa.models import Organization
from hoa.security.audit import Reason, client_ip, deny_request
from hoa.tenancy import OutsideTenancy, organizations_for

__all__ = ["OrganizationMixin", "client_ip", "organization_for", "require_permission"]


def organization_for(user, slug: str, *, request=None, operation: str = "") -> Organization:
    """Return the organization ``slug`` if ``user`` is its staff (or a superuser), else 404
    (the resolver, ``hoa.tenancy.organizations_for``, decides and audits).

    404 rather than 403: staff of one association must not learn that another exists.
    """
    try:
        (organization,) = organizations_for(user, slug=slug, request=request, operation=operation)
    except OutsideTenancy as exc:
        raise Http404 from exc
    return organization


def require_permission(user, perm: str) -> None:
    """Raise 403 unless ``user`` has the model permission ``perm``."""
    if not user.has_perm(perm):
        raise PermissionDenied


class OrganizationMixin(LoginRequiredMixin):
    """Resolve ``org_slug`` from the URL to an organization the user is staff of.

    Set ``permission_required`` to also demand a model permission (403 without it), and
    ``operation`` to name the fenced operation the view starts (for the audit). Refusals
    are audited: another association's slug (404), a missing permission (403), and an
    object id that exists in another association (the view's own 404).

    The view runs, and its page renders, in the association's time zone: times are shown
    and read in it, and "this month" is its own. ``request.organization`` is set too, so
    an error page (``hoa.answers.table.error_page``) keeps the association's layout.
    """

    permission_required: str | None = None
    operation = ""

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        self.organization = organization_for(
            request.user, kwargs["org_slug"], request=request, operation=self.operation
        )
        request.organization = self.organization
        if self.permission_required and not request.user.has_perm(self.permission_required):
            self._deny(Reason.PERMISSION, f"lacks {self.permission_required}", self.organization)
            raise PermissionDenied
        try:
            with timezone.override(self.organization.zone):
                response = super().dispatch(request, *args, **kwargs)
                if hasattr(response, "render") and not response.is_rendered:
                    response.render()  # a TemplateResponse renders here, in the zone
            return response
        except Http404:
            owner = self._owner_elsewhere(kwargs.get("pk"))
            if owner is not None and owner.pk != self.organization.pk:
                self._deny(Reason.TENANT, "object of another association", owner)
            raise

    def _deny(self, reason: Reason, note: str, organization: Organization) -> None:
        deny_request(
            self.request,
            reason=reason,
            note=note,
            organization=organization,
            operation=self.operation,
        )

    def _owner_elsewhere(self, pk) -> Organization | None:
        """The organization owning the id this view could not find here, if it exists."""
        # URL ids are canonical (<id:pk>, hoa.web.fields): within a bigint.
        if pk is None or not hasattr(self, "get_queryset") or not 0 < int(pk) < 2**63:
            return None
        rows = self.get_queryset().model._default_manager.filter(pk=pk)
        tenant_path = getattr(rows, "tenant_path", None)
        if tenant_path is None:
            return None
        owner_id = rows.values_list(tenant_path or "pk", flat=True).first()
        return Organization(pk=owner_id) if owner_id is not None else None

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["organization"] = self.organization
        return context
