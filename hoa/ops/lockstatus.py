"""What the lock status page shows, limited to what the viewer may see.

A superuser sees everything; staff only the resources of their organizations: leases found
by each operation's ``SCAN`` prefixes and kept when their name is one of the viewer's (not
when an audit event exists: a lease just granted has none), the audit trail filtered by
``FenceEvent.scope`` (``hoa.models.scope_for_organization``) in SQL. docs/security.md,
"Tenant isolation".
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from django import forms
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.charts import LeaseSpan, Mark, lock_timeline
from hoa.models import Organization, scope_for_organization
from hoa.operations import ResourceInfo, describe_resources, operations, scan_prefixes
from hoa.paging import PageNumberField
from locking import FenceLock, LockUnavailable, Outcome
from locking.keys import validate_resource
from locking.models import FenceEvent
from locking.operators import HolderInfo, holders

# Bounds: SCAN stops after this many leases per prefix (leases live seconds, so far fewer
# are ever held at once); the counters table covers at most this many resources.
HOLDER_SCAN_LIMIT = 200
COUNTER_LIMIT = 25
EVENTS_PER_PAGE = 50
TIMELINE_EVENTS = 60


@dataclass(frozen=True)
class Viewer:
    """Whose page this is: every organization (superuser) or the ones they are staff of."""

    organization_ids: frozenset[int] | None  # None means every organization

    @classmethod
    def of(cls, user) -> "Viewer":
        if user.is_superuser and user.is_active:
            return cls(organization_ids=None)
        ids = Organization.objects.for_user(user).values_list("pk", flat=True)
        return cls(organization_ids=frozenset(ids))

    @property
    def sees_everything(self) -> bool:
        return self.organization_ids is None

    def may_see_resource(self, info: "ResourceInfo") -> bool:
        if self.organization_ids is None:
            return True
        return info.organization is not None and info.organization.pk in self.organization_ids

    def events(self) -> QuerySet:
        """The audit events this viewer may read."""
        events = FenceEvent.objects.all()
        if self.organization_ids is None:
            return events
        scopes = {scope_for_organization(Organization(pk=pk)) for pk in self.organization_ids}
        return events.in_scopes(scopes)


@dataclass
class Holders:
    leases: list[HolderInfo] = field(default_factory=list)
    truncated: bool = False  # a SCAN bound was reached: there may be more
    error: str = ""  # Redis unreachable
    info: dict[str, "ResourceInfo"] = field(default_factory=dict)

    @property
    def rows(self) -> list[tuple[HolderInfo, "ResourceInfo"]]:
        return [(holder, self.info[holder.resource]) for holder in self.leases]


def visible_holders(viewer: Viewer, *, lock: FenceLock, limit: int = HOLDER_SCAN_LIMIT) -> Holders:
    """Return the current leases the viewer may see, each SCAN bounded by ``limit``."""
    if viewer.organization_ids is not None and not viewer.organization_ids:
        return Holders()
    prefixes = [""] if viewer.sees_everything else scan_prefixes(viewer.organization_ids)
    found: dict[str, HolderInfo] = {}
    truncated = False
    try:
        for prefix in prefixes:
            batch = holders(prefix=prefix, limit=limit, lock=lock)
            truncated = truncated or len(batch) >= limit
            found.update((holder.resource, holder) for holder in batch)
    except LockUnavailable as exc:
        return Holders(error=exc.reason)
    described = describe_resources(found)
    leases = [
        holder
        for holder in sorted(found.values(), key=lambda holder: holder.resource)
        if viewer.may_see_resource(described[holder.resource])
    ]
    return Holders(
        leases=leases,
        truncated=truncated,
        info={holder.resource: described[holder.resource] for holder in leases},
    )


@dataclass(frozen=True)
class CounterRow:
    info: ResourceInfo
    redis_counter: int | None

    @property
    def behind(self) -> bool:
        """Redis's counter is below what PostgreSQL recorded: the counter was lost.

        The next grant that the fence refuses starts a new epoch above the recorded token
        and retries once (a counter missing entirely is seen by the grant itself).
        """
        return (
            self.redis_counter is not None
            and self.info.recorded_token is not None
            and self.redis_counter < self.info.recorded_token
        )


def fence_counters(
    viewer: Viewer, resources: Iterable[str], *, lock: FenceLock
) -> tuple[list[CounterRow], str]:
    """Return Redis's counter next to PostgreSQL's recorded token for each visible resource."""
    described = describe_resources(list(dict.fromkeys(resources))[:COUNTER_LIMIT])
    rows = []
    try:
        for resource in sorted(described):
            info = described[resource]
            if not viewer.may_see_resource(info):
                continue
            rows.append(CounterRow(info=info, redis_counter=lock.current_token(resource)))
    except LockUnavailable as exc:
        return rows, exc.reason
    return rows, ""


def _validate_resource_field(value: str) -> None:
    try:
        validate_resource(value)
    except ValueError as exc:
        raise forms.ValidationError(str(exc)) from None


def _operation_choices() -> list[tuple[str, str]]:
    return [("", gettext_lazy("All operations"))] + [(op.name, op.name) for op in operations()]


class EventFilterForm(forms.Form):
    """The filters above the audit table; every field optional, every one validated alike:
    a value that is not one (an outcome or an operation the registry does not know, a
    malformed resource name, a page that is not a number) is a 400 saying which."""

    outcome = forms.ChoiceField(
        label=gettext_lazy("Outcome"),
        required=False,
        choices=[("", gettext_lazy("All outcomes")), *Outcome.choices],
        error_messages={"invalid_choice": gettext_lazy("Choose an outcome from the list.")},
    )
    # The registered operations' names (hoa.operations), read when the form is built.
    operation = forms.ChoiceField(
        label=gettext_lazy("Operation"),
        required=False,
        choices=_operation_choices,
        error_messages={"invalid_choice": gettext_lazy("Choose an operation from the list.")},
    )
    resource = forms.CharField(
        label=gettext_lazy("Resource"),
        required=False,
        max_length=200,
        validators=[_validate_resource_field],
    )
    page = PageNumberField()  # out of range: the nearest page (hoa.paging)

    def filter(self, events: QuerySet) -> QuerySet:
        data = self.cleaned_data
        if data.get("outcome"):
            events = events.filter(outcome=data["outcome"])
        if data.get("operation"):
            events = events.filter(operation=data["operation"])
        if data.get("resource"):
            events = events.for_resource(data["resource"])
        return events


def resource_timeline(viewer: Viewer, resource: str, *, holder: HolderInfo | None):
    """Draw the viewer-visible history of ``resource`` (and its current lease) as SVG."""
    events = list(viewer.events().for_resource(resource)[:TIMELINE_EVENTS])
    events.reverse()  # oldest first, left to right
    marks = [
        Mark(
            at=event.at,
            outcome=event.outcome,
            token=event.token,
            title=_("%(outcome)s · token %(token)s · %(actor)s · %(detail)s")
            % {
                "outcome": event.get_outcome_display(),
                "token": event.token if event.token is not None else "—",
                "actor": event.actor or "—",
                "detail": event.detail or "",
            },
        )
        for event in events
    ]
    lease = None
    if holder is not None:
        start = holder.acquired_at or timezone.now()
        lease = LeaseSpan(
            start=start,
            end=max(holder.expires_at, start),
            token=holder.token,
            title=_("Held by %(holder)s, token %(token)s")
            % {
                "holder": holder.label or holder.owner,
                "token": holder.token,
            },
        )
    return lock_timeline(
        marks,
        lanes=Outcome.choices,
        lease=lease,
        title=_("Timeline of %(resource)s") % {"resource": resource},
    )
