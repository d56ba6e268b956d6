"""The lock status page's data: holders from Redis, recent FenceEvents from PostgreSQL,
limited to the organizations the viewer is staff of."""

from hoa.models import Organization
from hoa.scopes import scope_for_organization
from locking import FenceLock, LockUnavailable
from locking.models import FenceEvent


def lock_status_context(request, *, limit: int = 200) -> dict:
    user = request.user
    scopes = None
    if not user.is_superuser:
        scopes = {scope_for_organization(org) for org in Organization.objects.for_user(user)}
    events = FenceEvent.objects.all()
    if scopes is not None:
        events = events.in_scopes(scopes)
    outcome = request.GET.get("outcome", "")
    if outcome in FenceEvent.Outcome.values:
        events = events.filter(outcome=outcome)
    resource = request.GET.get("resource", "")[:200]
    if resource:
        events = events.filter(resource=resource)
    holders, redis_error = [], ""
    try:
        holders = FenceLock().holders(limit=limit)
    except LockUnavailable as exc:
        redis_error = exc.reason
    if scopes is not None:
        visible = set(events.values_list("resource", flat=True).distinct()[:1000])
        holders = [h for h in holders if h.resource in visible]
    return {
        "holders": holders,
        "events": events[:100],
        "redis_error": redis_error,
        "outcomes": FenceEvent.Outcome.choices,
        "selected_outcome": outcome,
        "selected_resource": resource,
    }
