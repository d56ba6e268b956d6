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

    def save_model(self, request, obj, form, change):
        # Write only what the staff member changed: a full save would write back columns
        # that jobs and fenced services changed while the form was open (an SLA breach, a
        # status), from the form's stale copy.
        if change:
            concrete = {field.name for field in obj._meta.concrete_fields}
            obj.save(update_fields=[name for name in form.changed_data if name in concrete])
        else:
            obj.save()

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        related = db_field.related_model
        if related is Organization:
            kwargs["queryset"] = Organization.objects.for_user(request.user)
        elif hasattr(related.objects, "for_user") and related._meta.app_label != "auth":
            kwargs["queryset"] = related.objects.for_user(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
