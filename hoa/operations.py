"""Fenced operations, each declared and registered once where it lives, found by the frame here.

An app declares each ``FencedOperation`` in its ``operations`` module and registers it there
(``register``; the frame imports every app's ``operations`` module from ``HoaConfig.ready()``,
as the admin imports every ``admin`` module), with the ``Pages`` it adds to the frame
(``add_pages``, there or from its ``AppConfig.ready()``); the lock page, ``hoa.W001``, the
dashboard, the navigation, the complaint pages and the demo read them here, and ``begin``
returns the ``Permitted`` call that runs its steps under a lease (``hoa.fenced``).
The shared refusals are said by the frame (``hoa.answers.sentences``) in the words its
``answers`` gives.
docs/architecture.md, "One declaration per operation" and "Adding an operation", says how.
"""

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.http import HttpRequest

from hoa.answers.refusals import NotPermitted
from hoa.answers.sentences import Words
from hoa.fenced import Permitted, actor_label
from hoa.models import Organization
from hoa.security.audit import Reason, record_denial

if TYPE_CHECKING:
    from hoa.complaints.extensions import ComplaintExtension

# -- what the frame's pages need to know --------------------------------------------------


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
    """An entry of an organization's navigation: ``url_name`` is reversed with its slug;
    the entry is current on that page and on every page under its address."""

    label: str
    url_name: str
    order: int = 100  # place in the navigation


@dataclass(frozen=True)
class Panel:
    """What an operation adds to the dashboard and to the organization list.

    ``stats`` is a template included in the dashboard's row of numbers, with
    ``context(request, organization)`` added to the page's context.
    ``organization_annotations()`` are annotations on the organization list's queryset,
    shown by the ``summary`` template (``org`` in context).
    """

    context: Callable[[HttpRequest, Organization], dict] | None = None
    stats: str = ""
    summary: str = ""
    organization_annotations: Callable[[], dict] | None = None


@dataclass(frozen=True)
class Pages:
    """What an app adds to the frame's pages, registered with ``add_pages`` (as
    ``admin.site.register`` takes a ``ModelAdmin``): its place
    (``order``) on the dashboard and in the navigation, its ``links``, its ``dashboard``
    panel, what it adds to the complaint pages (``hoa.complaints.extensions``), the
    permissions the demo's staff group gets and its demo data (``seed_demo``, given the
    demo organizations by slug)."""

    app: str  # the label of the app that adds them
    order: int = 100
    links: tuple[Link, ...] = ()
    dashboard: Panel = field(default_factory=Panel)
    complaints: "ComplaintExtension | None" = None
    staff_permissions: tuple[str, ...] = ()
    seed_demo: Callable[[dict[str, Organization]], None] | None = None


# -- the declaration ------------------------------------------------------------------------


@dataclass(frozen=True)
class FencedOperation:
    """One fenced operation, declared once by its app (see the module docstring)."""

    name: str  # the audit's operation name, e.g. "key-handover"
    permission: str  # what a user needs to run it, e.g. "keys.hand_over"
    # Full match of its resource names; its named groups are what ``describe`` reads.
    resource: re.Pattern
    example: str  # a resource name, for a form's placeholder
    # Its words in the refusals every operation shares, which the frame says: what it was
    # doing, what its permission allows, whom its call tells (its app's answers module).
    answers: Words
    ttl: timedelta  # the lease's lifetime, unless ``ttl_setting`` is set
    # The Django setting (seconds) that overrides ``ttl``; hoa/settings.py reads any
    # <NAME>_LOCK_TTL_SECONDS from the environment.
    ttl_setting: str = ""
    # Resource names (each with its match) -> what they mean, in as few queries as it can.
    describe: Callable[[dict[str, re.Match]], dict[str, ResourceInfo]] | None = None

    def scan_prefixes(self, organization_ids: Iterable[int]) -> list[str]:
        """Where the lock page SCANs for these organizations' leases: the resource's text
        before its first group, and the association's id after it when that group is
        ``org`` (its leases, not every association's)."""
        literal = self.resource.pattern.split("(", 1)[0]
        if self.resource.pattern.startswith(f"{literal}(?P<org>"):
            return [f"{literal}{int(pk)}:" for pk in organization_ids]
        return [literal]

    @property
    def lease_ttl(self) -> timedelta:
        """The lease's lifetime: the setting if the project set it, else the declared one."""
        seconds = getattr(settings, self.ttl_setting, None) if self.ttl_setting else None
        return self.ttl if seconds is None else timedelta(seconds=float(seconds))

    def begin(
        self, actor, *, organization: Organization, resource: str, via: str = "", ip=None
    ) -> Permitted:
        """Check ``actor`` (a user, or ``None`` for the operator at the shell; ``via`` says
        where the request came from) and return the call that runs the operation.

        A user must be staff of ``organization`` with the operation's permission; a refusal
        is recorded as an ``AccessDenial`` and raised as ``NotPermitted``.
        """
        label = actor_label(actor, via)
        if actor is not None and not (
            organization.has_staff(actor) and actor.has_perm(self.permission)
        ):
            record_denial(
                reason=Reason.PERMISSION,
                note=f"not staff of {organization.slug} with {self.permission}",
                resource=resource,
                actor=label,
                ip=ip,
                organization=organization,
                operation=self.name,
            )
            raise NotPermitted(
                actor=actor.get_username(), organization=organization, operation=self
            )
        return Permitted(self, resource=resource, organization=organization, label=label, ip=ip)


# -- the registry ---------------------------------------------------------------------------

_registry: dict[str, FencedOperation] = {}


def register(operation: FencedOperation) -> FencedOperation:
    """Add ``operation`` where its app's ``operations`` module declares it; return it. A name
    is registered once."""
    existing = _registry.get(operation.name)
    if existing is not None and existing != operation:
        raise ValueError(f"a fenced operation named {operation.name!r} is already registered")
    _registry[operation.name] = operation
    return operation


def unregister(name: str) -> None:
    """Remove the operation ``name`` (tests that register one of their own)."""
    _registry.pop(name, None)


def operation(name: str) -> FencedOperation:
    """The registered operation ``name`` (``KeyError`` if there is none)."""
    return _registry[name]


def operations() -> list[FencedOperation]:
    """The registered operations, by name."""
    return sorted(_registry.values(), key=lambda operation: operation.name)


_pages: list[Pages] = []


def add_pages(pages: Pages) -> Pages:
    """Add what an app shows on the frame's pages (from its ``operations`` module or its
    ``AppConfig.ready()``)."""
    if pages not in _pages:
        _pages.append(pages)
    return pages


def remove_pages(pages: Pages) -> None:
    """Take ``pages`` back (tests that add some of their own)."""
    if pages in _pages:
        _pages.remove(pages)


def every_pages() -> list[Pages]:
    """What the apps add to the frame's pages, in their order."""
    return sorted(_pages, key=lambda pages: pages.order)


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
        if matches and operation.describe is not None:
            described.update(operation.describe(matches))
    return described


def scan_prefixes(organization_ids: Iterable[int]) -> list[str]:
    """The SCAN prefixes under which the leases of these organizations are found."""
    organization_ids = sorted(organization_ids)
    return [
        prefix for operation in operations() for prefix in operation.scan_prefixes(organization_ids)
    ]


def staff_permissions() -> list[str]:
    """Every permission the operations give an association's staff."""
    return [
        *(operation.permission for operation in operations()),
        *(name for pages in every_pages() for name in pages.staff_permissions),
    ]
