"""What an operator may see of the locks: the project's answer (``LOCK_SCOPES_CALLABLE``).

A scope is a tag the caller records with each attempt (``Attempt.scope``, e.g.
``"org:12"``); ``LOCK_SCOPES_CALLABLE`` answers which scopes a user may read and which
scope a resource name is in. The admin shows and breaks only what it allows;
``manage.py locks``, run by the operator at the shell, sees every scope. Callers import
these names from ``locking.operators`` (or ``locking``), the documented face.
"""

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from django.db.models import QuerySet
from django.utils.module_loading import import_string

from locking.conf import setting

if TYPE_CHECKING:
    from locking.models import FenceEvent


@dataclass(frozen=True)
class ViewerScopes:
    """What one viewer may see of the locks, as ``LOCK_SCOPES_CALLABLE`` answers it.

    ``visible``: the audit scopes (``FenceEvent.scope``) the viewer may read; ``None`` is
    every one. ``resources``: the scope each resource name asked about is in (``""``, or
    absent, for none). A lease or a resource is the viewer's when its scope is visible.
    """

    visible: frozenset[str] | None
    resources: Mapping[str, str] = field(default_factory=dict)

    def scope_of(self, resource: str) -> str:
        return self.resources.get(resource, "")

    def may_see(self, resource: str) -> bool:
        return self.visible is None or self.scope_of(resource) in self.visible

    def events(self, queryset: "QuerySet[FenceEvent]") -> "QuerySet[FenceEvent]":
        """``queryset`` (of ``FenceEvent``) narrowed to the visible scopes, in SQL."""
        if self.visible is None:
            return queryset
        return queryset.filter(scope__in=sorted(self.visible))


def viewer_scopes(user, resources: Iterable[str] = ()) -> ViewerScopes:
    """Ask ``LOCK_SCOPES_CALLABLE`` what ``user`` may see, and which scope each of
    ``resources`` is in. A superuser, and the operator at the shell (``user`` None: what
    ``manage.py locks`` runs as), see every scope whatever the callable says."""
    resources = list(dict.fromkeys(resources))
    answer = import_string(setting("LOCK_SCOPES_CALLABLE"))(user, resources)
    if user is None or (user.is_active and user.is_superuser):
        return replace(answer, visible=None)
    return answer


def recorded_scopes(user, resources: Collection[str]) -> ViewerScopes:
    """The default ``LOCK_SCOPES_CALLABLE``, for a project that tags no tenants: everyone
    with locking's permissions reads the attempts recorded without a scope; tagged ones
    are for superusers, until the project says who may read them. A resource is in the
    scope its latest recorded attempt was recorded with (none: no scope)."""
    from locking.models import FenceEvent  # models load after the app registry

    latest = (
        FenceEvent.objects.using(setting("LOCK_DATABASE"))
        .filter(resource__in=list(resources))
        .order_by("resource", "-at", "-id")
        .distinct("resource")  # PostgreSQL's DISTINCT ON: one row per resource
        .values_list("resource", "scope")
    )
    return ViewerScopes(visible=frozenset({""}), resources=dict(latest) if resources else {})
