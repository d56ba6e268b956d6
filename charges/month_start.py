"""The month start: every organization's charges for a month, each exactly once.

``start_month`` is the service behind ``generate_monthly_charges --all-orgs``: it walks every
organization (those of ``actor`` if one is given), runs ``generate_monthly_charges`` for
each and returns what the walk came to; the command only parses, shows progress and turns
the result into an exit code through the answer table.

Several cron hosts may run it at once and share the work: an organization another host
holds (busy, or superseded by it) is skipped, and after its pass a host waits, up to
``wait``, for those: it confirms the completed ones from the database and retries those
whose holder went away. ``workers`` spreads the walk over that many processes on this host;
each gets chunks of ids, keeps its connections, and records the new month's first fence
epochs of a chunk at once. Redis down stops the walk at once.
"""

import contextlib
import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import date, datetime, timedelta
from itertools import repeat
from multiprocessing.util import Finalize

from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models import Q
from django.utils import timezone

from charges import answers
from charges.billing import ChargeLine
from charges.models import MonthlyChargeRun
from charges.operations import charge_resource
from charges.selectors import current_month
from charges.services import generate_monthly_charges, generate_together, units_ahead
from hoa.answers.refusals import Refusal
from hoa.batch import Batch, BatchKind, ItemOutcome, chunks
from hoa.models import Organization
from hoa.tenancy import organizations_for
from locking import LockUnavailable, Outcome, prepare_fences

# Organizations per task sent to a worker: ids go out, one query reads them there.
CHUNK = 50
# Organizations committed in one transaction, each under its own lease (generate_together):
# one BEGIN and one durable COMMIT for a chunk's, fewer when the billing calls are slow
# (docs/locking/using.md, "Attempts that commit together").
TOGETHER = CHUNK

# How the walk counts an association's answer: generated here, done (by another worker
# during the walk; "before" when its run was completed before the walk started); another
# worker has it now (busy, or took over from this attempt), or billing's answer did not
# say whether it billed: tried again, by the same key. Anything else failed.
MONTH_START = BatchKind(
    settled={Outcome.COMMITTED: "here", Outcome.ALREADY_DONE: "elsewhere"},
    retried=(Outcome.BUSY, Outcome.STALE, Outcome.UNKNOWN),
    summary=answers.MONTH_START_SUMMARY,
    failed=answers.MONTH_START_FAILED,
    held=answers.MONTH_START_HELD,
)


def start_month(
    *,
    month: date | None,
    actor,
    via: str,
    wait: timedelta,
    workers: int = 1,
    on_outcome: Callable[[ItemOutcome, Batch], None] | None = None,
) -> Batch:
    """Generate every organization's charges for ``month`` (those ``actor`` is staff of,
    if given) or, with ``month=None``, for each one's current month in its own time zone,
    ``workers`` processes at a time; wait up to ``wait`` for the ones another
    host holds. ``on_outcome(outcome, walk)`` hears each organization's answer as it
    comes, with the walk so far (``hoa.batch``: an outcome's ``key`` is the organization's
    id, ``again`` its month)."""
    organizations = Organization.objects.for_user(actor) if actor else Organization.objects
    # Ids only: a worker reads its chunk's rows itself (memory flat in the count).
    ids = list(organizations.order_by("pk").values_list("pk", flat=True).distinct())
    facts = {"month": answers.walked_month(month)}
    walk = Batch(MONTH_START, total=len(ids), wait=wait, facts=facts)
    started_at = timezone.now()
    with _walk(chunks(ids, CHUNK), month, actor, via, workers, started_at) as outcomes:
        walk.take(outcomes, on_outcome)
    walk.wait_for_others(lambda held: _again(held, actor, via, started_at), on_outcome)
    return walk


@contextlib.contextmanager
def _walk(
    id_chunks: list, month: date | None, actor, via: str, workers: int, started_at: datetime
) -> Iterator[Iterable]:
    """Every organization's outcome, chunk by chunk, here or in ``workers`` processes."""
    user_id = actor.pk if actor else None
    tasks = (id_chunks, repeat(month), repeat(user_id), repeat(via), repeat(started_at))
    if workers == 1:
        if actor is not None:
            _actors[actor.pk] = actor
        yield (outcome for chunk in map(generate_chunk, *tasks) for outcome in chunk)
        return
    # Fork, so the workers start with Django set up; they must not share the parent's
    # database connection.
    connections.close_all()
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker) as pool:
        try:
            yield (outcome for chunk in pool.map(generate_chunk, *tasks) for outcome in chunk)
        finally:  # a walk stopped early (Redis down) leaves nothing queued behind it
            pool.shutdown(cancel_futures=True)


def _again(held: dict, actor, via: str, started_at: datetime) -> Iterator[ItemOutcome]:
    """The organizations another worker held (id -> month): confirmed from the database
    if it completed them, else tried once more each (their holder may have gone)."""
    months = Q()
    for org_id, month in held.items():
        months |= Q(organization_id=org_id, month=month)
    done = (
        MonthlyChargeRun.objects.filter(months)
        .completed()
        .values_list("organization_id", "organization__slug", "month")
    )
    confirmed = set()
    for org_id, slug, month in done:
        confirmed.add(org_id)
        message = answers.done_elsewhere(month)
        yield ItemOutcome(org_id, slug, Outcome.ALREADY_DONE, message, "elsewhere", month)
    left = Organization.objects.filter(pk__in=list(held.keys() - confirmed)).order_by("pk")
    for organization in left:
        yield generate_for(organization, held[organization.pk], actor, via, started_at)


def month_of(organization: Organization, month: date | None) -> date:
    """``month``, or the organization's current month in its own time zone."""
    if month is not None:
        return month
    with timezone.override(organization.zone):
        return current_month()


def generate_for(
    organization: Organization,
    month: date,
    user,
    via: str,
    started_at: datetime,
    lines: list[ChargeLine] | None = None,
) -> ItemOutcome:
    """Run the service for one organization and classify its answer (``_outcome``).
    ``lines``: its units, as its chunk's ``units_ahead``."""
    try:
        answer = generate_monthly_charges(
            organization=organization, month=month, actor=user, via=via, lines=lines
        )
    except Refusal as refusal:  # each one raised here declares its outcome
        answer = refusal
    return _outcome(organization, month, answer, started_at)


def _outcome(organization: Organization, month: date, answer, started_at: datetime) -> ItemOutcome:
    """An organization's result or refusal as the walk counts it: a run found completed
    before ``started_at`` (the walk's start) was done before, not by another worker of
    this month start."""
    completed_at = None if isinstance(answer, Refusal) else answer.row.completed_at
    before = (
        answer.outcome == Outcome.ALREADY_DONE
        and completed_at is not None
        and completed_at < started_at
    )
    count = "before" if before else ""
    return MONTH_START.outcome(organization.pk, organization.slug, answer, again=month, count=count)


# A worker process's actor, read once (its permission cache then lasts the whole run).
_actors: dict = {}


def generate_chunk(
    org_ids: list[int], month: date | None, user_id: int | None, via: str, started_at: datetime
) -> list:
    """Generate the charges of the organizations ``org_ids``: a worker's task."""
    user = None
    if user_id is not None:
        user = _actors.get(user_id) or _actors.setdefault(
            user_id, get_user_model()._default_manager.get(pk=user_id)
        )
    # The foreign-key checks of the charges must not keep a plan made when the runs table
    # was smaller (a sequential scan, for each charge, over every run written since).
    MonthlyChargeRun.objects.replan_charge_checks()
    organizations = list(Organization.objects.filter(pk__in=org_ids).order_by("pk"))
    if user is not None:
        # Which of them ``user`` is staff of, asked in one query (the resolver notes them);
        # any other is refused by the operation's own check: ids handed over are not trusted.
        organizations_for(user, ids=org_ids, partial=True)
    months = {organization.pk: month_of(organization, month) for organization in organizations}
    # A new month is a new resource per organization: their first epochs in one commit.
    # Redis down is left to the grants to answer, one by one, in the walk's own words.
    with contextlib.suppress(LockUnavailable):
        prepare_fences(charge_resource(o, months[o.pk]) for o in organizations)
    # The chunk's units in one query, not one per organization.
    ahead = units_ahead(organizations)
    # TOGETHER at a time in one transaction, each under its own lease (generate_together).
    outcomes = []
    for batch in chunks([(o, months[o.pk], ahead[o.pk]) for o in organizations], TOGETHER):
        answers = generate_together(batch, actor=user, via=via)
        for (organization, month, _), answer in zip(batch, answers, strict=True):
            outcomes.append(_outcome(organization, month, answer, started_at))
    return outcomes


def _start_worker() -> None:
    # Forked from a parent that closed its connections: each worker opens its own, keeps
    # it for all its tasks and closes it when the pool shuts the worker down.
    Finalize(None, connections.close_all, exitpriority=10)
