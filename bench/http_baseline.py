"""The HTTP case's baseline (URL conf of ``bench.http_settings``): under ``PREFIX``, the
real assign view and ``assign_vendor`` with one name bound to a stand-in, so it takes every
check, query and step of theirs, as they change. ``ASSIGNMENT`` checks the actor and runs
the operation's own steps in the runner's order under a lease that never was (no Redis, no
audit row), with the fence row's row lock in place of the fence UPDATE (no token recorded).
"""

import types

from django.db import transaction
from django.urls import path

from hoa.fenced import Call
from hoa.urls import handler400, handler403, handler404, handler500, urlpatterns  # noqa: F401
from vendors import services, views
from vendors.operations import ASSIGNMENT

PREFIX = "bench/unfenced/"
TOKEN = 1  # every assignment's fence_token (the column is positive); no row records it


class _UnfencedCall(Call):
    def run(self, steps):
        lease = types.SimpleNamespace(resource=self.resource, token=TOKEN, check=lambda: None)
        looked = steps.look(lease)
        told = steps.call_outside(lease, looked) if looked.needs_call else None
        with transaction.atomic():
            steps.fence_row(looked).select_for_update().values_list("pk").get()
            return steps.commit(lease, looked, told)


def _begin(actor, **given) -> Call:
    return _UnfencedCall(**vars(ASSIGNMENT.begin(actor, **given)))


def _rebound(function, **names):
    """``function`` (its code, defaults and closure) reading ``names`` as its globals."""
    rebound = types.FunctionType(
        function.__code__, {**function.__globals__, **names}, function.__name__,
        function.__defaults__, function.__closure__,
    )  # fmt: skip
    rebound.__kwdefaults__ = function.__kwdefaults__
    return rebound


unfenced = {"ASSIGNMENT": types.SimpleNamespace(begin=_begin)}
assign_unfenced = _rebound(services.assign_vendor, **unfenced)


class UnfencedAssignView(views.AssignVendorView):
    post = _rebound(views.AssignVendorView.post, assign_vendor=assign_unfenced)


ASSIGN = "orgs/<slug:org_slug>/complaints/<int:pk>/assign/"  # the real one's, under PREFIX
urlpatterns = [*urlpatterns, path(PREFIX + ASSIGN, UnfencedAssignView.as_view())]
