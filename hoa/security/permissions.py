"""What a request may do: the methods an address takes, the permissions a user holds (read
in one query), and who operates the fence.

**Methods.** A method an address does not take is a 405 with ``Allow``. Without this, a
PUT, DELETE or PATCH reached the CSRF check before any view had said what it takes, and was
answered 403 "This form has expired" (even on ``/healthz``, which has no form).
``AllowedMethodsMiddleware`` runs just before ``CsrfViewMiddleware`` and asks the resolved
view what it takes. The site is pages and HTML forms: nothing takes more than GET, HEAD and
POST (``SITE_METHODS``), and

- a class-based view takes those of them it has a handler for among its
  ``http_method_names`` (HEAD with GET, as ``View.setup`` answers it; Django's form views
  also map PUT to their POST, which no form of ours sends);
- a function marked with ``allow_methods("GET", "HEAD")`` takes those;
- any other function (the admin's, Django's auth views wrapped in functions) takes all
  three; one that takes fewer still answers 405 itself.

The 405 page is the site's error page (the association's layout on its addresses) with an
``Allow`` header, as RFC 9110 asks. OPTIONS is answered the same way: no client of the site
needs it.

**Permissions.** The authentication backend is Django's ``ModelBackend`` with a user's own
permissions and those of the user's groups read in one ``UNION`` (Django reads them in two
queries the first time a request asks ``has_perm``; every fenced POST asks), cached on the
user for the request exactly as Django caches them. Everything else (authentication,
``is_active``, superusers, object permissions: none) is Django's.

**Operators.** Office staff run the association (its complaints and fenced operations) and
are told what happened in their words; operators run the platform: they read the lock
status page, tokens and the audit of fenced attempts, and break a stuck lease. An operator
is a superuser or a user with locking's permissions (the demo's "Operators" group has them).
"""

from functools import wraps

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Permission
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from hoa.answers.table import error_page

SITE_METHODS = ("GET", "HEAD", "POST")


def allow_methods(*methods: str):
    """``require_http_methods(methods)``, told to the middleware too: a method outside
    ``methods`` is answered 405 before the CSRF check could answer 403."""
    allowed = tuple(method.upper() for method in methods)

    def decorator(view):
        checked = require_http_methods(list(allowed))(view)

        @wraps(checked)
        def wrapper(request, *args, **kwargs):
            return checked(request, *args, **kwargs)

        wrapper.allowed_methods = allowed
        return wrapper

    return decorator


def allowed_methods(view) -> tuple[str, ...]:
    """The methods ``view`` (a resolved view function) takes, upper case."""
    declared = getattr(view, "allowed_methods", None)
    if declared is not None:
        return tuple(declared)
    view_class = getattr(view, "view_class", None)
    if view_class is None:
        return SITE_METHODS
    names = getattr(view, "view_initkwargs", {}).get(
        "http_method_names", view_class.http_method_names
    )
    takes = {name.upper() for name in names if hasattr(view_class, name)}
    if "GET" in takes and "head" in names:
        takes.add("HEAD")  # View.setup answers HEAD with get()
    return tuple(method for method in SITE_METHODS if method in takes)


class AllowedMethodsMiddleware:
    """Answer 405 with ``Allow`` for a method the resolved view does not take."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        allowed = allowed_methods(view_func)
        if request.method in allowed:
            return None
        response = error_page(
            request,
            405,
            _("Method not allowed"),
            _("This address does not take %(method)s requests; it takes %(allowed)s.")
            % {"method": request.method[:20], "allowed": ", ".join(allowed)},
        )
        response["Allow"] = ", ".join(allowed)
        return response


# -- permissions ---------------------------------------------------------------------------


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


# -- operators -----------------------------------------------------------------------------

OPERATOR_PERMISSIONS = ("locking.view_fenceevent", "locking.break_lease")


def is_operator(user) -> bool:
    """Whether ``user`` sees the fencing internals (tokens, leases, fenced attempts)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    return user.is_superuser or any(user.has_perm(perm) for perm in OPERATOR_PERMISSIONS)
