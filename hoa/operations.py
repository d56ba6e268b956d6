"""Fenced operations, each declared once where it lives and found by the frame here.

``hoa`` is the frame: organizations, staff, complaints and the pages every operation shares.
It names no app built on it. An app declares its operation once, in its ``operations``
module, and registers it from ``AppConfig.ready()`` (as Django's apps register admin classes
and checks)::

    HANDOVER = FencedOperation(                      # e.g. a "keys" app handing out unit keys
        name="key-handover",                         # the audit's operation name
        permission="keys.hand_over",                 # what staff need to run it
        resource=re.compile(r"key-handover:unit:(?P<unit>[0-9]{1,18})"),
        example="key-handover:unit:1",
        answers=answers.WORDS,                       # its words in the shared refusals
        ttl=timedelta(seconds=30), ttl_setting="KEYS_LOCK_TTL_SECONDS",
        describe=selectors.describe_resources,      # resource names -> ResourceInfo
    )

    class KeysConfig(AppConfig):
        def ready(self):
            register(HANDOVER)
            add_pages(Pages(                         # what it shows on the frame's pages
                app="keys",
                order=40,
                links=(Link(_("Keys"), "keys:handovers"),),
                dashboard=Panel(stats="keys/_dashboard_stats.html", context=selectors.panel),
                seed_demo=demo.seed_demo,
            ))

The frame finds the operation here: the lock status page describes its resource names
(``describe_resources``, ``scan_prefixes``) and the check ``hoa.W001`` reads its lease TTL.
Its ``Pages`` are what the dashboard, the organization list, the navigation, the complaint
pages (``hoa.complaints.extensions``) and the demo (its data, the staff group's
permissions) show of it. Its services run it: ``begin`` checks
the actor, and the ``Call`` it returns runs the operation's steps under a lease
(``hoa.fenced``). The refusals every operation shares (busy, superseded, lease ran out, lock
service down, the outside failed, not permitted) are the frame's own classes, raised with
the operation, and said by the frame (``hoa.answers.sentences``) in the words its
``answers`` gives: what it was doing, what its permission allows, whom its call tells.
What an operation adds to the admin of a frame model is registered from its app's
``admin`` module (``hoa.admin_mixins.extend``), as Django's ``admin.site.register`` is.
Adding an operation touches ``INSTALLED_APPS``, the root URLconf and the new app.
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
from hoa.fenced import Call, actor_label
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
    """What an app adds to the frame's pages, registered with ``add_pages`` from its
    ``AppConfig.ready()`` (as ``admin.site.register`` takes a ``ModelAdmin``): its place
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
    ) -> Call:
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
        return Call(self, resource=resource, organization=organization, label=label, ip=ip)


# -- the registry ---------------------------------------------------------------------------

_registry: dict[str, FencedOperation] = {}


def register(operation: FencedOperation) -> FencedOperation:
    """Add ``operation`` (from its app's ``AppConfig.ready()``); a name is registered once."""
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
    """Add what an app shows on the frame's pages (from its ``AppConfig.ready()``)."""
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
