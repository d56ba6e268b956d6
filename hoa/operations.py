"""The registry of fenced operations: the one seam between ``hoa`` and the apps above it.

``hoa`` is the frame (organizations, staff, the pages every operation shares: dashboard,
lock status, demo data). It names no app built on it. Each fenced operation registers
itself from its ``AppConfig.ready()`` with what the frame needs to know::

    register(Operation(                        # e.g. a "keys" app handing out unit keys
        name="key-handover",                   # the audit's operation name
        resource=re.compile(r"key-handover:unit:(?P<unit>[0-9]{1,18})"),
        describe=selectors.describe_resources,  # resource names -> ResourceInfo
        scan_prefixes=lambda organization_ids: ["key-handover:unit:"],
        links=(Link(_("Keys"), "keys:handovers", current=("keys:handovers",)),),
        dashboard=Panel(stats="keys/_dashboard_stats.html", context=selectors.panel),
    ))

The lock status page turns resource names into what they mean and who may see them
(``describe_resources``, ``scan_prefixes``); the dashboard and the organization list show
each operation's panel; the navigation shows its links; ``seed_demo`` calls its demo
data. Adding a third operation touches no file in ``hoa``.
"""

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date

from django.http import HttpRequest

from hoa.models import Organization


@dataclass(frozen=True)
class ResourceInfo:
    """A resource name turned into what it means for the people who run the association."""

    resource: str
    organization: Organization | None = None
    description: str = ""
    # The fence as PostgreSQL recorded it (the fenced row's last_fence_token).
    recorded_token: int | None = None
    url: str = ""


@dataclass(frozen=True)
class Link:
    """An entry of an organization's navigation: ``url_name`` is reversed with its slug."""

    label: str
    url_name: str
    # The view names (``namespace:name``) under which this link is the current page.
    current: tuple[str, ...] = ()
    order: int = 100  # place in the navigation


@dataclass(frozen=True)
class Panel:
    """What an operation adds to the dashboard and to the organization list.

    ``stats`` and ``cards`` are templates included in the dashboard's row of numbers and
    in its grid of cards, with ``context(request, organization, month)`` added to the
    page's context. ``organization_annotations(month)`` are annotations on the
    organization list's queryset, shown by the ``summary`` template (``org`` in context).
    """

    context: Callable[[HttpRequest, Organization, date], dict] | None = None
    stats: str = ""
    cards: str = ""
    summary: str = ""
    organization_annotations: Callable[[date], dict] | None = None


@dataclass(frozen=True)
class Operation:
    name: str
    # Full match of the operation's resource names; its named groups are what
    # ``describe`` reads.
    resource: re.Pattern
    # Resource names (each with its match) -> what they mean, in as few queries as it can.
    describe: Callable[[dict[str, re.Match]], dict[str, ResourceInfo]]
    # The SCAN prefixes under which the leases of these organizations are found.
    scan_prefixes: Callable[[Iterable[int]], list[str]]
    example: str = ""  # a resource name, for a form's placeholder
    order: int = 100  # place on the dashboard and in the navigation
    links: tuple[Link, ...] = ()
    dashboard: Panel = field(default_factory=Panel)
    # Permissions the demo's staff group gets ("app_label.codename").
    staff_permissions: tuple[str, ...] = ()
    # Creates the operation's demo data for the demo organizations ({slug: organization}).
    seed_demo: Callable[[dict[str, Organization]], None] | None = None

    @classmethod
    def named_by(cls, names, **rest) -> "Operation":
        """An operation whose names come from its app's ``resources`` module: ``OPERATION``,
        ``RESOURCE``, ``scan_prefixes()`` and ``EXAMPLE``."""
        return cls(
            name=names.OPERATION,
            resource=names.RESOURCE,
            scan_prefixes=names.scan_prefixes,
            example=names.EXAMPLE,
            **rest,
        )


_registry: dict[str, Operation] = {}


def register(operation: Operation) -> Operation:
    """Add ``operation`` (from its app's ``AppConfig.ready()``); a name is registered once."""
    existing = _registry.get(operation.name)
    if existing is not None and existing != operation:
        raise ValueError(f"a fenced operation named {operation.name!r} is already registered")
    _registry[operation.name] = operation
    return operation


def operations() -> list[Operation]:
    """The registered operations in their dashboard order."""
    return sorted(_registry.values(), key=lambda operation: (operation.order, operation.name))


def describe_resources(resources: Iterable[str]) -> dict[str, ResourceInfo]:
    """Map resource names to their organization, meaning, page and recorded fence token.

    A name no operation claims is described by itself (and only a superuser sees it).
    """
    described = {resource: ResourceInfo(resource=resource) for resource in resources}
    for operation in operations():
        matches = {
            resource: match
            for resource in described
            if (match := operation.resource.fullmatch(resource)) is not None
        }
        if matches:
            described.update(operation.describe(matches))
    return described


def scan_prefixes(organization_ids: Iterable[int]) -> list[str]:
    """The SCAN prefixes under which the leases of these organizations are found."""
    organization_ids = sorted(organization_ids)
    return [
        prefix for operation in operations() for prefix in operation.scan_prefixes(organization_ids)
    ]


def staff_permissions() -> list[str]:
    return [name for operation in operations() for name in operation.staff_permissions]
