"""Tenant scoping: the one mechanism that decides which organizations a user may see.

A staff member sees only the organizations they hold a ``StaffMembership`` for; a
superuser sees all. Every queryset that leaves a view, admin page or command goes through
``for_user`` so that isolation is decided in one place.
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
