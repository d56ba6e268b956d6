"""The floor under the models: which rows belong to an organization (``TenantQuerySet``),
and the per-user note of the organizations a user was found staff of.

It lives below ``hoa.models`` so that the resolver (``hoa.tenancy``), which reads
organizations, and the models, which scope their rows, import it without a loop.
"""

from django.db import models


class TenantQuerySet(models.QuerySet):
    """A queryset of rows that belong to an organization through ``tenant_path``."""

    # Path from the model to its Organization, e.g. "organization" or "run__organization".
    tenant_path = "organization"

    def for_user(self, user):
        """Return the rows of the organizations ``user`` is staff of (all for superusers)."""
        if user is None or not user.is_authenticated or not user.is_active:
            return self.none()
        if user.is_superuser:
            return self
        prefix = f"{self.tenant_path}__" if self.tenant_path else ""
        return self.filter(**{f"{prefix}memberships__user": user})

    def for_organization(self, organization):
        """Return the rows that belong to ``organization``."""
        return self.filter(**{self.tenant_path or "pk": organization})


def staff_of(user) -> set:
    """The ids of the organizations ``user`` (this object) was found staff of by a query:
    ``Organization.has_staff``'s own, or the resolver's (``hoa.tenancy``). Nothing else
    adds to it. Kept on the user object like Django's permission cache: a request's, or a
    command's run, never across them."""
    return user.__dict__.setdefault("_hoa_staff_of", set())
