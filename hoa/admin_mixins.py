"""Tenant scoping for the Django admin: staff see and edit only their organizations' rows."""

from hoa.models import Organization


class TenantAdminMixin:
    """Limit changelists, change pages, actions and foreign-key choices to the user's orgs.

    The model's default manager must be a ``TenantQuerySet`` manager. Objects of other
    organizations are simply not in the queryset, so their change pages answer 404-style
    ("doesn't exist") redirects exactly like missing objects.
    """

    def get_queryset(self, request):
        return super().get_queryset(request).for_user(request.user)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        related = db_field.related_model
        if related is Organization:
            kwargs["queryset"] = Organization.objects.for_user(request.user)
        elif hasattr(related.objects, "for_user") and related._meta.app_label != "auth":
            kwargs["queryset"] = related.objects.for_user(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
