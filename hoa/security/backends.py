"""The authentication backend: Django's ``ModelBackend``, its permissions read in one query.

Django's backend reads a user's own permissions and those of the user's groups in two
queries the first time a request asks ``has_perm``; every fenced POST asks. Here both come
in one ``UNION``, cached on the user for the request exactly as Django caches them.
Everything else (authentication, ``is_active``, superusers, object permissions: none) is
Django's.
"""

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Permission


class PermissionsInOneQueryBackend(ModelBackend):
    def get_all_permissions(self, user_obj, obj=None):
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            if user_obj.is_superuser:
                granted = Permission.objects.all()
            else:
                own = Permission.objects.filter(user=user_obj)
                granted = own.union(Permission.objects.filter(group__user=user_obj))
            rows = granted.values_list("content_type__app_label", "codename")
            user_obj._perm_cache = {f"{app_label}.{codename}" for app_label, codename in rows}
        return user_obj._perm_cache
