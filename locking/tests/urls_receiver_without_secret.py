"""A URLconf with fenced receivers given no secret, for check locking.E011
(locking/tests/test_checks.py): one at the top, one behind an include() and another
decorator, and one that has its own secret."""

from functools import wraps

from django.http import JsonResponse
from django.urls import include, path

from locking.receiving import fenced_receiver


def logged(view):
    """A project's own decorator around a receiver: it keeps the receiver's attributes."""

    @wraps(view)
    def logging_view(request, *args, **kwargs):
        return view(request, *args, **kwargs)

    return logging_view


@fenced_receiver("billing")
def billing(request, call):
    return JsonResponse({"accepted": call.token})


@logged
@fenced_receiver("dispatch")
def dispatch(request, call):
    return JsonResponse({"accepted": call.token})


@fenced_receiver("payments", secret="payments-own-secret")
def payments(request, call):
    return JsonResponse({"accepted": call.token})


hooks = [path("dispatch/", dispatch), path("payments/", payments)]

urlpatterns = [
    path("billing/", billing),
    path("hooks/", include(hooks)),
]
