"""What a fenced operation adds to the complaint pages and workflow, without the workflow
naming it.

An operation that works on complaints (vendor assignment) declares a ``ComplaintExtension``
in its ``FencedOperation``: the guard of the statuses that need someone assigned, a column
and a filter of the complaint list, a section of the complaint page, and entries of its
timeline. The complaint pages ask ``extensions()`` for them.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.http import HttpRequest

from hoa.models import Complaint, Organization
from hoa.operations import every_pages


@dataclass(frozen=True)
class AssignmentGuard:
    """The workflow's guard: whether someone is assigned to a complaint (a vendor).

    Only assigning makes a complaint ``assigned``; ``in progress`` needs someone assigned
    (refused with ``needed``, the sentence that says what to do first); reopening lands on
    ``assigned`` while someone is. Closing ends the assignment: ``on_close(complaint, at=,
    actor=)`` runs in the close's transaction, under the complaint's row lock, after the
    status moved (``at`` is the close's time); it ends whatever is assigned and arranges
    to tell whoever was, after the commit.
    """

    is_assigned: Callable[[Complaint], bool]
    needed: str
    on_close: Callable[..., None] | None = None


@dataclass(frozen=True)
class ListColumn:
    """A column of the complaint list: its header and its cell, ``cell(complaint)``: the
    ``<td>``'s HTML (safe: escaped by the function), reading what the extension's
    ``annotate`` added. A function rather than a template: the list draws one per row, and
    including a template per row cost more than the rest of the row's cells."""

    header: str
    cell: Callable[[Complaint], str]


@dataclass(frozen=True)
class ListFilter:
    """A filter of the complaint list: the GET parameter ``name``, its form field for an
    organization (a choice that does not validate is a 400), and how a value filters."""

    name: str
    field: Callable[[Organization], forms.Field]
    apply: Callable[[QuerySet, str], QuerySet]


@dataclass(frozen=True)
class Section:
    """What the complaint page shows of the extension: rows of the complaint's facts
    (``facts``, a template of ``<dt>``/``<dd>`` pairs) and a card (``card``), with
    ``context(request, complaint)``; a view that re-renders the page passes its own values
    (a form with errors), which win."""

    context: Callable[[HttpRequest, Complaint], dict]
    facts: str = ""
    card: str = ""


@dataclass(frozen=True)
class TimelineEntry:
    """One line of a complaint's timeline: when, what (``item``, rendered by ``template``
    with ``entry`` in its context) and, at the same instant, which comes first (the higher
    ``rank`` above)."""

    at: datetime
    kind: str
    template: str
    item: Any
    rank: int = 0

    @property
    def key(self) -> tuple:
        return (self.at, self.rank, getattr(self.item, "pk", 0))


@dataclass(frozen=True)
class ComplaintExtension:
    assignment_guard: AssignmentGuard | None = None
    annotate: Callable[[QuerySet], QuerySet] | None = None
    column: ListColumn | None = None
    filter: ListFilter | None = None
    section: Section | None = None
    timeline: Callable[[Complaint], Iterable[TimelineEntry]] | None = None


def extensions() -> list[ComplaintExtension]:
    """What the apps add to the complaint pages, in their order."""
    return [pages.complaints for pages in every_pages() if pages.complaints]


def assignment_guard() -> AssignmentGuard | None:
    """The guard of the statuses that need someone assigned, if an operation declares one."""
    guards = (e.assignment_guard for e in extensions() if e.assignment_guard is not None)
    return next(guards, None)


def assigned(complaint: Complaint) -> bool | None:
    """Whether someone is assigned to ``complaint``; ``None`` when nothing is ever assigned
    (no operation declares an ``AssignmentGuard``), so no status waits for it."""
    guard = assignment_guard()
    return None if guard is None else guard.is_assigned(complaint)
