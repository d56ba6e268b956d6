"""Who may see and act on what: the one view-side tenant check."""

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404

from hoa.models import Organization


def organization_for(user, slug: str) -> Organization:
    """Return the organization ``slug`` if ``user`` is its staff (or a superuser), else 404.

    404 rather than 403: staff of one association must not learn that another exists.
    """
    return get_object_or_404(Organization.objects.for_user(user), slug=slug)


def require_permission(user, perm: str) -> None:
    """Raise 403 unless ``user`` has the model permission ``perm``."""
    if not user.has_perm(perm):
        raise PermissionDenied


class OrganizationMixin(LoginRequiredMixin):
    """Resolve ``org_slug`` from the URL to an organization the user is staff of.

    Set ``permission_required`` to also demand a model permission (403 without it).
    """

    permission_required: str | None = None

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        self.organization = organization_for(request.user, kwargs["org_slug"])
        if self.permission_required:
            require_permission(request.user, self.permission_required)
        return super().dispatch(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["organization"] = self.organization
        return context


def client_ip(request) -> str | None:
    """The client's address as the WSGI server saw it (proxies are not trusted here)."""
    return request.META.get("REMOTE_ADDR") or None
