"""The one runner of fenced operations: an operation's steps (``FencedSteps``) in their
order under a fresh lease (``Permitted.run``), or many attempts on different resources committed
together (``run_together``), and what a successful attempt returns (``Result``).

docs/architecture.md, "A service reads top to bottom", has the order of the steps, why the
claims commit before the call, and how locking's refusals are answered.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import QuerySet

from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LeaseRanOut,
    LockServiceDown,
    OutcomeUnknown,
    Refusal,
    Superseded,
)
from hoa.answers.table import Audience, Done
from hoa.integrations.webhooks import CallResult, ExternalCallFailed, ExternalCallUnknown
from hoa.models import Organization, record_unknown, scope_for_organization
from locking import (
    Lease,
    LeasedAttempt,
    LeaseLost,
    LockHeld,
    LockUnavailable,
    Outcome,
    StaleFencingToken,
    advance_fence,
    claim_fence,
    run_fenced,
)
from locking.audit import Attempt
from locking.tracing import span

if TYPE_CHECKING:
    from hoa.operations import FencedOperation


def actor_label(actor, via: str = "") -> str:
    """Who asked, as the audit trail records it: ``alice``, ``alice via cli:ops``,
    ``cli:ops`` (the operator at the shell, no user) or ``system``."""
    name = actor.get_username() if actor is not None else ""
    return " via ".join(part for part in (name, via) if part) or "system"


class FencedSteps:
    """One attempt of an operation, as the steps ``Permitted.run`` calls in order.

    Subclasses set ``endpoint`` (the outside's name, for the span) and ``subject`` (the
    facts its refusals carry, e.g. the organization and month) and write ``look``,
    ``call_outside`` and ``commit``; ``fence_row`` only if the look may read no row to
    fence; ``claim`` and ``release`` only if the operation marks its own row before the
    call; ``create`` only if the attempt may find no row to fence and can insert it with its
    final values; ``take_back`` only if a refusal at commit can follow a call that told
    someone.
    """

    endpoint: str = ""

    # The operation's own claim before the call, if it makes one (``None``: none), as
    # ``claim(lease, found) -> bool``: in a transaction the runner commits on its own
    # before the call, mark the row (the payment: the invoice sent for payment); ``False``
    # when there is nothing to call about any more (done meanwhile: the commit finds it),
    # or raise a ``Refusal`` or ``StaleFencingToken`` (the call is not made).
    claim: Callable[[Lease, Any], bool] | None = None

    @property
    def subject(self) -> dict[str, Any]:
        return {}

    def look(self, lease: Lease) -> "Look":
        """In the claim's transaction, after the claim: read what the decision needs,
        nothing written; return a ``Look`` (whether the outside must be told, the fenced row
        as it was read)."""
        raise NotImplementedError

    def call_outside(self, lease: Lease, found) -> object | None:
        """Tell the outside, once; return whom it told (``None``: the call was skipped), or
        ``post_fenced``'s ``CallResult`` (the operation's party, unless skipped). Raise
        ``ExternalCallFailed`` when it refused or failed."""
        raise NotImplementedError

    def release(self, lease: Lease, found) -> None:
        """Take ``claim``'s mark back after the outside refused the call (it did nothing)."""

    def create(self, lease: Lease, found, receipt) -> "Result | None":
        """In the commit's transaction, before anything else: when ``look`` found no row
        that carries the fence, insert it fenced (``insert_fenced(row, lease)``) with its
        final values, and the other writes; return the result. ``None`` (the default, and
        whenever ``insert_fenced`` inserted nothing): the runner fences ``fence_row`` and
        calls ``commit``. Its first write must be ``insert_fenced``: a refusal there writes
        nothing (``run_together`` relies on it, to need no savepoint)."""
        return None

    def fence_row(self, found) -> QuerySet:
        """The row that carries the fence, in the commit's transaction: by default the one
        the look read (``found.fenced``); an operation whose row may be new overrides it."""
        if found.fenced is None:
            raise NotImplementedError("no row read by the look: name the row to fence")
        return type(found.fenced)._default_manager.filter(pk=found.fenced.pk)

    def commit(self, lease: Lease, found, receipt) -> "Result":
        """After the fence, in its transaction: the state check and the writes (``told``:
        what ``call_outside`` returned, or ``None``). Return the result (its ``outcome``:
        committed or already done), or raise a ``Refusal``."""
        raise NotImplementedError

    def take_back(self, lease: Lease, found, refusal: Refusal) -> str:
        """The best-effort cancellation of a call made in vain; say what it got. Never
        raises: the caller is owed its refusal, not an error about the cleanup."""
        return "nothing to take back"


@dataclass(frozen=True, kw_only=True)
class Look:
    """What ``look`` found, as the runner reads it; an operation's look subclasses it with
    what its decision needs."""

    needs_call: bool  # the outside must be told
    # The row that carries the fence, as the look read it (``None``: none read, or none
    # yet): a token at or below its ``last_fence_token`` is refused before any call.
    fenced: Any = None


@dataclass(frozen=True)
class Result(Done):
    """What a successful attempt did: ``outcome`` (committed now, or already done), the
    lease's ``token``, the ``row`` it wrote or found (the run, the assignment, the payment,
    the budget), and ``words``, the operation's sentence of it for an audience."""

    outcome: Outcome
    token: int
    row: Any
    words: Callable[["Result", Audience], str] = field(repr=False, compare=False)

    @property
    def committed(self) -> bool:
        """Done by this attempt (``False``: found already done)."""
        return self.outcome == Outcome.COMMITTED

    @property
    def message(self) -> str:
        """Staff's sentence (pages, admin messages)."""
        return self.words(self, Audience.STAFF)

    def __str__(self) -> str:
        """The operators' sentence (the command's line)."""
        return self.words(self, Audience.OPERATORS)


@dataclass(frozen=True)
class Permitted:
    """One permitted call of an operation (``FencedOperation.begin``), before its lease."""

    operation: "FencedOperation"
    resource: str
    organization: Organization
    label: str  # who asked, as the audit records it
    ip: str | None = None

    @property
    def attempt(self) -> Attempt:
        """Who asks, as the audit records it."""
        return Attempt(
            actor=self.label,
            operation=self.operation.name,
            scope=scope_for_organization(self.organization),
            ip=self.ip,
        )

    def run(self, steps: FencedSteps):
        """Run ``steps`` under a fresh lease on the resource; return ``commit``'s result."""
        under_lease = partial(_run_steps, steps, self)
        try:
            return run_fenced(
                self.resource, under_lease, ttl=self.operation.lease_ttl, attempt=self.attempt
            )
        except LOCKING_REFUSALS as exc:
            raise self.refusal(exc, steps) from exc

    def refusal(self, exc: Exception, steps: FencedSteps) -> Refusal:
        """locking's refusal ``exc`` as the shared refusal, carrying the operation and the
        steps' subject."""
        subject = {"operation": self.operation, **steps.subject}
        match exc:
            case LockHeld():
                refusal: Refusal = Busy.held(exc, **subject)
            case StaleFencingToken():
                refusal = Superseded.refused(self.resource, exc, **subject)
            case LeaseLost():
                refusal = LeaseRanOut.lost(exc, **subject)
            case LockUnavailable():
                refusal = LockServiceDown(resource=self.resource, reason=exc.reason, **subject)
            case _:
                raise TypeError(f"not a refusal of locking: {exc!r}")
        receipt = getattr(exc, "told_in_vain", None)  # set by _taking_back: overtaken after a call
        if receipt is not None:
            refusal.told_in_vain, refusal.cancellation = receipt, exc.cancellation
        return refusal


LOCKING_REFUSALS = (LockHeld, StaleFencingToken, LeaseLost, LockUnavailable)


@dataclass
class _Attempt:
    """One attempt of ``run_together``: its call, steps and lease, what its claim looked
    at, whom its call told, and its answer once it has one."""

    index: int
    call: Permitted
    steps: FencedSteps
    leased: LeasedAttempt
    granted_at: float  # time.monotonic() of its grant, or of its lease's last extension
    found: Any = None
    receipt: Any = None
    result: Any = None
    refused: Exception | None = None


def run_together(calls: list[tuple[Permitted, FencedSteps]]) -> list:
    """Attempts of one operation on different resources, committed together; return each
    one's result or refusal (not raised), in order.

    For a batch whose rows are mostly new, as the month start's chunk: one ``BEGIN`` and
    one durable ``COMMIT`` for many claims, and another for their writes, instead of two
    each. Each attempt runs ``Permitted.run``'s steps under its own lease
    (``locking.LeasedAttempt``):

    1. every grant (Redis down at one: the attempts not granted yet get the same refusal
       without a try of their own);
    2. every claim and look in one transaction (a refused claim writes nothing, and looks
       only read);
    3. the outside calls one by one, and the commits in one transaction (each attempt's
       ``create``, else its fence and ``commit`` in a savepoint of its own). The
       calls made commit as soon as the first lease of the group has used half its time (a
       slow outside); the leases of the attempts not called yet are extended, and they
       form the next group (one whose lease ran out meanwhile is granted again).

    After each commit the attempts are recorded and released. A token refused because the
    Redis counter went behind runs again alone (``Permitted.run`` recovers from it). Anything
    that is no refusal (a database error) is raised, every lease released.
    """
    answers: list = [None] * len(calls)
    waiting = list(enumerate(calls))
    while waiting:
        granted = _grant(waiting, answers)
        try:
            claimed = _claim(granted, answers)
            waiting = []
            while claimed:
                called, claimed, again = _call_outside_until_half_time(claimed, answers)
                _commit(called, answers)
                waiting += again
        except BaseException as exc:
            for attempt in granted:
                if answers[attempt.index] is None:  # nothing of theirs committed
                    attempt.leased.refused(exc)
            raise
    return answers


def _grant(waiting: list, answers: list) -> list[_Attempt]:
    granted: list[_Attempt] = []
    for position, (index, (call, steps)) in enumerate(waiting):
        try:
            leased = LeasedAttempt(
                call.resource, ttl=call.operation.lease_ttl, attempt=call.attempt
            )
        except LockUnavailable as exc:
            # Redis down: the next grants would each wait for it to fail too (a timeout
            # apiece when it hangs). The rest get the same answer untried.
            for later, (other, other_steps) in waiting[position:]:
                answers[later] = other.refusal(exc, other_steps)
            break
        except LOCKING_REFUSALS as exc:
            answers[index] = call.refusal(exc, steps)  # recorded by the grant
            continue
        granted.append(_Attempt(index, call, steps, leased, time.monotonic()))
    return granted


def _claim(granted: list[_Attempt], answers: list) -> list[_Attempt]:
    """Every claim in one transaction; return the attempts it let go on (the others are
    answered, recorded and released once it committed)."""
    with transaction.atomic():
        for attempt in granted:
            lease = attempt.leased.lease
            try:
                attempt.found = _look(attempt.steps, lease)  # a refused claim writes nothing
            except (Refusal, StaleFencingToken) as exc:
                attempt.refused = exc
    going_on = []
    for attempt in granted:
        if attempt.refused is None:
            going_on.append(attempt)
        else:
            _answer(attempt, answers)
    return going_on


def _call_outside_until_half_time(claimed: list[_Attempt], answers: list) -> tuple:
    """Call the outside for the attempts ``claimed`` that need it, until the first lease
    of the group has used half its time; return those to commit now, those whose leases
    were extended for the next group, and those to grant again (their leases could not be
    extended: released, unrecorded, their claims to be superseded by their next grant's)."""
    first = claimed[0]
    half = first.call.operation.lease_ttl.total_seconds() / 2
    for position, attempt in enumerate(claimed):
        if position and time.monotonic() - first.granted_at > half:
            return (claimed[:position], *_extended(claimed[position:]))
        if attempt.found.needs_call:
            lease = attempt.leased.lease
            try:
                attempt.receipt = _call_outside(attempt.steps, attempt.call, lease, attempt.found)
            except (Refusal, LeaseLost, StaleFencingToken) as exc:
                attempt.refused = exc
    return claimed, [], []


def _extended(rest: list[_Attempt]) -> tuple[list[_Attempt], list]:
    kept, again = [], []
    for attempt in rest:
        if attempt.leased.lease.extend(attempt.call.operation.lease_ttl):
            attempt.granted_at = time.monotonic()
            kept.append(attempt)
        else:
            attempt.leased.refused(_NotCalledInTime())  # released; no outcome to record
            again.append((attempt.index, (attempt.call, attempt.steps)))
    return kept, again


class _NotCalledInTime(Exception):
    """An attempt of ``run_together`` whose lease ran out before its turn to call came."""


def _commit(called: list[_Attempt], answers: list) -> None:
    """The attempts ``called`` in one transaction; then each recorded and released."""
    with transaction.atomic():
        for attempt in called:
            if attempt.refused is None:
                _commit_one(attempt)
    for attempt in called:
        _answer(attempt, answers)


def _commit_one(attempt: _Attempt) -> None:
    """``attempt``'s writes in the shared transaction: its ``create`` (its stale token
    refused by ``insert_fenced``, which then wrote nothing), else the fence and ``commit``
    in a savepoint of its own, so that a refusal there (a newer holder's claim, the
    operation's state check) rolls back this one only; a refusal is kept for after the
    commit. A refusal ``create`` raises after writing (its statements may have failed) is
    raised: the shared transaction rolls back, and the caller decides what to run again
    (the month start runs its associations one by one)."""
    steps, lease, found, receipt = (
        attempt.steps,
        attempt.leased.lease,
        attempt.found,
        attempt.receipt,
    )
    try:
        with _taking_back(steps, lease, found, receipt):
            result = steps.create(lease, found, receipt)
    except StaleFencingToken as stale:  # insert_fenced refused it: nothing was written
        attempt.refused = stale
        return
    if result is None:
        try:
            with _taking_back(steps, lease, found, receipt), transaction.atomic():  # a savepoint
                advance_fence(steps.fence_row(found), lease)
                result = steps.commit(lease, found, receipt)
        except (Refusal, StaleFencingToken) as exc:
            attempt.refused = exc
            return
    lease.record_committed(result.outcome)
    attempt.result = result


def _answer(attempt: _Attempt, answers: list) -> None:
    """Record and release ``attempt`` (its transaction has ended) and set its answer: its
    result, or its refusal as the operation's; a token refused because the Redis counter is
    behind runs again alone. Anything else is raised."""
    if attempt.refused is None:
        attempt.leased.finished(attempt.result)
        answers[attempt.index] = attempt.result
        return
    attempt.leased.refused(attempt.refused)
    answers[attempt.index] = _refusal_or_rerun(
        attempt.call, attempt.steps, attempt.leased, attempt.refused
    )


def _refusal_or_rerun(call: Permitted, steps: FencedSteps, leased: LeasedAttempt, exc: Exception):
    """What ``run_together`` answers for an attempt refused after its grant (recorded and
    released by then): the operation's refusal; an attempt whose token was refused because
    the Redis counter is behind runs again alone. Anything else is raised."""
    if isinstance(exc, StaleFencingToken) and leased.counter_is_behind(exc):
        try:
            return call.run(steps)
        except Refusal as refusal:
            return refusal
    if isinstance(exc, Refusal):
        return exc
    if isinstance(exc, LOCKING_REFUSALS):
        refusal = call.refusal(exc, steps)
        refusal.__cause__ = exc
        return refusal
    raise exc


def _run_steps(steps: FencedSteps, call: Permitted, lease: Lease):
    """The steps in their order, under ``lease`` (``run_fenced``'s work)."""
    found = _look(steps, lease)  # the claim, committed on its own: durable before any call
    receipt = _call_outside(steps, call, lease, found) if found.needs_call else None
    with _taking_back(steps, lease, found, receipt), transaction.atomic():
        return _commit_steps(steps, lease, found, receipt)


def _look(steps: FencedSteps, lease: Lease) -> Look:
    """The runner's claim on the resource's record, then ``look`` (every older holder's
    commit is visible to it); a token at or below the one on the row it read is refused."""
    claim_fence(lease)  # one statement: a holder overtaken since its grant stops here
    found = steps.look(lease)
    row = found.fenced
    if row is not None and lease.token <= row.last_fence_token:
        # The row was fenced beyond the resource's record (under another name, or the Redis
        # counter went behind, which run_fenced tells apart): not worth a call.
        raise StaleFencingToken(lease.token, row.last_fence_token)
    return found


def _commit_steps(steps: FencedSteps, lease: Lease, found, receipt):
    """In the commit's transaction: ``create``, else the fence and ``commit``; the audit
    row commits with the writes."""
    result = steps.create(lease, found, receipt)  # the fenced row is new: one statement
    if result is None:
        advance_fence(steps.fence_row(found), lease)  # the same grant: passes unless overtaken
        result = steps.commit(lease, found, receipt)
    lease.record_committed(result.outcome)
    return result


@contextmanager
def _taking_back(steps: FencedSteps, lease: Lease, found, receipt) -> Iterator[None]:
    """A refusal raised in the block after the outside was told says so, and the steps'
    ``take_back`` sends the best-effort cancellation: the operation's own refusals and
    locking's alike (a newer holder's claim refused this one at the fence, the lease was
    lost), which ``Permitted.refusal`` turns into the shared refusals with whom they told."""
    try:
        yield
    except (Refusal, StaleFencingToken, LeaseLost) as refusal:
        if receipt is not None:  # rolled back, but the outside was told: say so, take it back
            refusal.told_in_vain = receipt  # type: ignore[union-attr]
            refusal.cancellation = steps.take_back(lease, found, refusal)  # type: ignore[union-attr]
        raise


def _call_outside(steps: FencedSteps, call: Permitted, lease: Lease, found):
    """The operation's claim, if it makes one, committed on its own; then the call."""
    lease.check()  # not worth a claim or a call if the lease is lost or uncertain: LeaseLost
    if steps.claim is not None:
        with transaction.atomic():
            if not steps.claim(lease, found):
                return None  # done meanwhile by an older holder: the commit finds it
        lease.check()  # the claim took a round trip: still ours?
    try:
        with span("external-call", lease=lease, attributes={"endpoint": steps.endpoint}):
            told = steps.call_outside(lease, found)
    except ExternalCallFailed as exc:
        steps.release(lease, found)  # the outside refused: it did nothing
        raise CallFailed(
            operation=call.operation, reason=exc.reason, status=exc.status, **steps.subject
        ) from exc
    except ExternalCallUnknown as exc:
        # It may have been acted on: recorded before anything else, settled by its key.
        record_unknown(
            operation=call.operation.name,
            resource=call.resource,
            endpoint=exc.endpoint or steps.endpoint,
            idempotency_key=exc.idempotency_key,
            token=lease.token,
            organization=call.organization,
            reason=exc.reason,
            actor=call.label,
        )
        raise OutcomeUnknown(
            operation=call.operation,
            reason=exc.reason,
            status=exc.status,
            **steps.subject,
        ) from exc
    if isinstance(told, CallResult):  # a webhook: it told the operation's party, unless skipped
        return None if told.skipped else call.operation.answers.party
    return told
