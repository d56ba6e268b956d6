"""The authentication backend: Django's ``ModelBackend``, its permissions in one query."""

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Permission
from django.db.models import Q


class PermissionsInOneQueryBackend(ModelBackend):
    """``ModelBackend`` whose ``get_all_permissions`` reads the user's and their groups'
    permissions in one query, not two: every fenced POST asks ``has_perm`` first."""

    def get_all_permissions(self, user_obj, obj=None):
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            permissions = Permission.objects.all()
            if not user_obj.is_superuser:
                permissions = permissions.filter(Q(user=user_obj) | Q(group__user=user_obj))
            names = permissions.values_list("content_type__app_label", "codename").order_by()
            user_obj._perm_cache = {f"{app_label}.{codename}" for app_label, codename in names}
        return user_obj._perm_cache
