"""The one runner of fenced operations: named steps, in order, under a fresh lease.

An operation's service describes one attempt as steps (a ``FencedSteps``) and hands them to
the ``Call`` its declaration's ``begin`` returned::

    call = GENERATION.begin(actor, organization=organization, resource=resource, via=via)
    return call.run(ChargeRun(organization=organization, month=month, by=call.label))

``Call.run`` takes the lease (``locking.run_fenced``: grant, audit, release, counter
recovery) and calls the steps in this order, the same for every operation:

1. ``look(lease)``: read what the decision needs; nothing is written.
2. ``call_outside(lease, looked)``, only when ``looked.needs_call``: after ``lease.check()``
   (a lease lost or uncertain tells nobody), in the ``external-call`` span; a failed call
   is the operation's ``call_failed`` refusal and nothing is written.
3. One ``transaction.atomic()``: ``create(lease, looked, told)`` first, when the row that
   carries the fence is not there yet: it inserts that row with the token on it
   (``insert_fenced``) and writes, in one statement fewer. Otherwise (or when another
   holder created the row meanwhile) ``advance_fence`` on ``fence_row(looked)`` first (a
   holder whose lease was taken over learns it here), then ``commit(lease, looked,
   told)``: the state check and the writes. The attempt's audit row commits with them.
4. A refusal raised by ``commit`` after the outside was told: ``take_back`` sends the
   best-effort cancellation, and the refusal records whom it told in vain.

``run_together`` runs the same steps for several attempts on different resources (the
month start's chunk of associations), each under its own lease, and commits them in one
transaction: ``create`` for each, a savepoint for one whose row was there after all.

locking's refusals (busy, superseded, lease lost, Redis down) are raised as the operation's
own classes (``FencedOperation.refusals``), carrying the steps' ``subject``. Superseded
covers both refusals of a stale token: by the fence (``StaleFencingToken``) and by the
service the outside call went to (its 409: ``StaleAtReceiver``, a ``StaleFencingToken``
that the webhook client raises), so a late call refused there is answered 409 / exit 75
and audited ``stale``, not as a failed call.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import QuerySet

from hoa.answers.refusals import Refusal
from hoa.integrations.webhooks import ExternalCallFailed
from hoa.models import Organization
from hoa.scopes import scope_for_organization
from locking import (
    Attempt,
    Lease,
    LeasedAttempt,
    LeaseLost,
    LockHeld,
    LockUnavailable,
    StaleFencingToken,
    advance_fence,
    run_fenced,
    span,
)

if TYPE_CHECKING:
    from hoa.operations import FencedOperation, Refusals


def actor_label(actor, via: str = "") -> str:
    """Who asked, as the audit trail records it: ``alice``, ``alice via cli:ops``,
    ``cli:ops`` (the operator at the shell, no user) or ``system``."""
    name = actor.get_username() if actor is not None else ""
    return " via ".join(part for part in (name, via) if part) or "system"


class FencedSteps:
    """One attempt of an operation, as the steps ``Call.run`` calls in order.

    Subclasses set ``endpoint`` (the outside's name, for the span) and ``subject`` (the
    facts its refusals carry, e.g. the organization and month) and write ``look``,
    ``call_outside``, ``fence_row`` and ``commit``; ``create`` only if the attempt may
    find no row to fence and can insert it with its final values; ``take_back`` only if a
    refusal at commit can follow a call that told someone.
    """

    endpoint: str = ""

    @property
    def subject(self) -> dict[str, Any]:
        return {}

    def look(self, lease: Lease) -> Any:
        """Read what the decision needs, nothing written; the result's ``needs_call`` says
        whether the outside must be told."""
        raise NotImplementedError

    def call_outside(self, lease: Lease, looked) -> object | None:
        """Tell the outside, once; return whom it told (``None``: the call was skipped).
        Raise ``ExternalCallFailed`` when it refused or failed."""
        raise NotImplementedError

    def create(self, lease: Lease, looked, told):
        """In the commit's transaction, before anything else: when ``look`` found no row
        that carries the fence, insert it fenced (``insert_fenced(row, lease)``) with its
        final values, and the other writes; return the result. ``None`` (the default, and
        whenever ``insert_fenced`` inserted nothing): the runner fences ``fence_row`` and
        calls ``commit``."""
        return None

    def fence_row(self, looked) -> QuerySet:
        """The row that carries the fence, in the commit's transaction (created there if
        need be)."""
        raise NotImplementedError

    def commit(self, lease: Lease, looked, told):
        """After the fence, in its transaction: the state check and the writes (``told``:
        whom ``call_outside`` told, or ``None``). Return the result (its ``outcome``:
        committed or already done), or raise a ``Refusal``."""
        raise NotImplementedError

    def take_back(self, lease: Lease, looked, refusal: Refusal) -> str:
        """The best-effort cancellation of a call made in vain; say what it got. Never
        raises: the caller is owed its refusal, not an error about the cleanup."""
        return "nothing to take back"


@dataclass(frozen=True)
class Call:
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
        under_lease = partial(_run_steps, steps, self.operation.refusals)
        try:
            return run_fenced(
                self.resource, under_lease, ttl=self.operation.lease_ttl, attempt=self.attempt
            )
        except LOCKING_REFUSALS as exc:
            raise self.refusal(exc, steps) from exc

    def refusal(self, exc: Exception, steps: FencedSteps) -> Refusal:
        """locking's refusal ``exc`` as the operation's own, carrying the steps' subject."""
        refusals, subject = self.operation.refusals, steps.subject
        match exc:
            case LockHeld():
                return refusals.busy.held(exc, **subject)
            case StaleFencingToken():
                return refusals.superseded.refused(self.resource, exc, **subject)
            case LeaseLost():
                return refusals.lease_ran_out.lost(exc, **subject)
            case LockUnavailable():
                return refusals.lock_service_down(
                    resource=self.resource, reason=exc.reason, **subject
                )
        raise TypeError(f"not a refusal of locking: {exc!r}")


LOCKING_REFUSALS = (LockHeld, StaleFencingToken, LeaseLost, LockUnavailable)


@dataclass
class _Ready:
    """One attempt of ``run_together`` after its look and its call, before the commit."""

    index: int
    call: Call
    steps: FencedSteps
    leased: LeasedAttempt
    looked: Any
    told: Any
    result: Any = None
    refused: Exception | None = None


def run_together(calls: list[tuple[Call, FencedSteps]]) -> list:
    """Attempts of one operation on different resources, committed together; return each
    one's result or refusal (not raised), in order.

    For a batch whose rows are mostly new, as the month start's chunk: one ``BEGIN`` and
    one durable ``COMMIT`` for many attempts instead of one each. Each attempt runs
    ``Call.run``'s steps under its own lease (``locking.LeasedAttempt``): ``look`` and
    ``call_outside`` one by one, outside any transaction; then one ``transaction.atomic()``
    in which each, in order, runs its ``create`` (the fenced row inserted with the token on
    it, and the writes) and writes its audit row. One whose row is there after all fences
    it and commits in a savepoint of its own, so its refusal (a newer holder's token, the
    operation's state check) rolls back that one only. After the commit each is recorded
    and released. The attempts gathered commit as soon as the first one's lease has used
    half its time (a slow outside): the rest form the next transaction. Redis down at a
    grant: the attempts not begun get the same refusal without a try of their own. A token refused
    because the Redis counter went behind runs again alone (``Call.run`` recovers from
    it). Anything that is no refusal (a database error) is raised, every lease released:
    the transaction committed nothing.
    """
    answers: list = [None] * len(calls)
    waiting = list(enumerate(calls))
    while waiting:
        ready, waiting = _gather(waiting, answers)
        _commit_ready(ready, answers)
    return answers


def _gather(waiting: list, answers: list) -> tuple[list[_Ready], list]:
    """Grant, look and call outside for the attempts ``waiting``, until the first lease
    granted has used half its time; return those ready to commit, and those not begun."""
    ready: list[_Ready] = []
    first_granted = None
    try:
        for position, (index, (call, steps)) in enumerate(waiting):
            ttl = call.operation.lease_ttl.total_seconds()
            if first_granted is not None and time.monotonic() - first_granted > ttl / 2:
                return ready, waiting[position:]
            try:
                leased = LeasedAttempt(
                    call.resource, ttl=call.operation.lease_ttl, attempt=call.attempt
                )
            except LockUnavailable as exc:
                # Redis down: the next grants would each wait for it to fail too (a
                # timeout apiece when it hangs). The rest get the same answer untried.
                for later, (other, other_steps) in waiting[position:]:
                    answers[later] = other.refusal(exc, other_steps)
                return ready, []
            except LOCKING_REFUSALS as exc:
                answers[index] = call.refusal(exc, steps)  # recorded by the grant
                continue
            first_granted = first_granted or time.monotonic()
            try:
                looked = steps.look(leased.lease)
                told = None
                if looked.needs_call:
                    told = _call_outside(steps, call.operation.refusals, leased.lease, looked)
            except Exception as exc:
                leased.refused(exc)
                answers[index] = _refusal_or_rerun(call, steps, leased, exc)
                continue
            ready.append(_Ready(index, call, steps, leased, looked, told))
    except BaseException as exc:
        _release_all(ready, exc)
        raise
    return ready, []


def _commit_ready(ready: list[_Ready], answers: list) -> None:
    """The attempts ``ready`` in one transaction; then each recorded and released."""
    try:
        with transaction.atomic():
            for attempt in ready:
                _commit_together(attempt)
    except BaseException as exc:
        _release_all(ready, exc)
        raise
    for attempt in ready:
        if attempt.refused is None:
            attempt.leased.finished(attempt.result)
            answers[attempt.index] = attempt.result
        else:
            attempt.leased.refused(attempt.refused)
            answers[attempt.index] = _refusal_or_rerun(
                attempt.call, attempt.steps, attempt.leased, attempt.refused
            )


def _release_all(ready: list[_Ready], exc: BaseException) -> None:
    for attempt in ready:  # nothing of theirs committed: released, recorded if a refusal
        attempt.leased.refused(exc)


def _commit_together(attempt: _Ready) -> None:
    """``attempt``'s writes in the shared transaction: its ``create``, else the fence and
    ``commit`` in a savepoint, a refusal there kept for after the commit."""
    steps, lease, looked, told = attempt.steps, attempt.leased.lease, attempt.looked, attempt.told
    result = steps.create(lease, looked, told)
    if result is None:
        try:
            with _taking_back(steps, lease, looked, told), transaction.atomic():  # a savepoint
                advance_fence(steps.fence_row(looked), lease)
                result = steps.commit(lease, looked, told)
        except (Refusal, StaleFencingToken) as exc:
            attempt.refused = exc
            return
    lease.record_committed(result.outcome)
    attempt.result = result


def _refusal_or_rerun(call: Call, steps: FencedSteps, leased: LeasedAttempt, exc: Exception):
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


def _run_steps(steps: FencedSteps, refusals: "Refusals", lease: Lease):
    """The steps in their order, under ``lease`` (``run_fenced``'s work)."""
    looked = steps.look(lease)
    told = _call_outside(steps, refusals, lease, looked) if looked.needs_call else None
    with _taking_back(steps, lease, looked, told), transaction.atomic():
        result = steps.create(lease, looked, told)  # the fenced row is new: one statement
        if result is None:
            advance_fence(steps.fence_row(looked), lease)
            result = steps.commit(lease, looked, told)
        lease.record_committed(result.outcome)  # the audit row commits with the writes
    return result


@contextmanager
def _taking_back(steps: FencedSteps, lease: Lease, looked, told) -> Iterator[None]:
    """A refusal raised in the block after the outside was told says so, and the steps'
    ``take_back`` sends the best-effort cancellation."""
    try:
        yield
    except Refusal as refusal:
        if told is not None:  # rolled back, but the outside was told: say so, take it back
            refusal.told_in_vain = told
            refusal.cancellation = steps.take_back(lease, looked, refusal)
        raise


def _call_outside(steps: FencedSteps, refusals: "Refusals", lease: Lease, looked):
    lease.check()  # not worth a call if the lease is lost or uncertain: LeaseLost
    try:
        with span("external-call", lease=lease, attributes={"endpoint": steps.endpoint}):
            return steps.call_outside(lease, looked)
    except ExternalCallFailed as exc:
        raise refusals.call_failed(reason=exc.reason, status=exc.status, **steps.subject) from exc
