"""The one runner of fenced operations: named steps, in order, under a fresh lease.

An operation's service describes one attempt as steps (a ``FencedSteps``) and hands them to
the ``Call`` its declaration's ``begin`` returned::

    call = GENERATION.begin(actor, organization=organization, resource=resource, via=via)
    return call.run(ChargeRun(organization=organization, month=month, by=call.label))

``Call.run`` takes the lease (``locking.run_fenced``: grant, audit, release, counter
recovery) and calls the steps in this order, the same for every operation:

1. **The claim**: ``locking.claim_fence(lease)`` records the lease's token on the
   resource's durable record, one statement committed on its own (a holder whose lease
   was re-granted learns it here), then ``look(lease)`` reads what the decision needs.
2. ``call_outside(lease, looked)``: after ``lease.check()`` (a lease lost or uncertain
   tells nobody), in the ``external-call`` span. A refused call is the operation's
   ``CallFailed`` and nothing more is written; a call whose outcome is unknown (a
   timeout, a lost connection, a redirect, a 5xx) is recorded (``hoa.models.OutsideCall``,
   committed on its own) and answered ``OutcomeUnknown``: settled later by the same key.
3. **The commit**, one ``transaction.atomic()``: ``create(lease, looked, told)`` first, when
   the row that carries the fence is not there yet: it inserts that row with the token on
   it (``insert_fenced``) and writes, in one statement fewer. Otherwise (or when another
   holder created the row meanwhile) ``advance_fence`` on ``fence_row(looked)`` (the same
   grant passes; a newer holder's claim made this one stale), then ``commit(lease, looked,
   told)``: the state check and the writes. The attempt's audit row commits with them.
4. A refusal at the commit after the outside was told, whoever refused (the operation's
   state check, or the fence: a newer holder overtook this one): ``take_back`` sends the
   best-effort cancellation, and the refusal records whom it told in vain.

Why the claim commits before the call: the outside system and the database must keep the
same attempt's version, whichever holder commits first. A receiver keeps the highest token
per key, so a newer holder's call replaces an older one's there. Without the claim, an
older holder that called, paused, and committed before the newer holder's fence would leave
its version in the database while the outside kept the newer one (the newer holder then
finds the work done and says so). With it, once a newer holder has claimed, no older holder
can commit (its second fence is refused), and a newer holder's look runs after every older
commit, so it never calls the outside about work already done. docs/architecture.md has
the argument with both orders.

``run_together`` runs the same steps for several attempts on different resources (the
month start's chunk of associations), each under its own lease: their claims in one
transaction, their calls one by one, their commits in one transaction.

locking's refusals (busy, superseded, lease lost, Redis down) are raised as the shared
refusals (``hoa.answers.refusals``), carrying the operation and the steps' ``subject``.
Superseded
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

from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LeaseRanOut,
    LockServiceDown,
    OutcomeUnknown,
    Refusal,
    Superseded,
)
from hoa.integrations.webhooks import ExternalCallFailed, ExternalCallUnknown
from hoa.models import Organization, record_unknown
from hoa.scopes import scope_for_organization
from locking import (
    Lease,
    LeasedAttempt,
    LeaseLost,
    LockHeld,
    LockUnavailable,
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
    """One attempt of an operation, as the steps ``Call.run`` calls in order.

    Subclasses set ``endpoint`` (the outside's name, for the span) and ``subject`` (the
    facts its refusals carry, e.g. the organization and month) and write ``look``,
    ``call_outside``, ``fence_row`` and ``commit``; ``create`` only if the attempt may
    find no row to fence and can insert it with its final values; ``take_back`` only if a
    refusal at commit can follow a call that told someone.
    """

    endpoint: str = ""
    party: str = ""  # whom the call tells, as staff read it ("the payment service")

    @property
    def subject(self) -> dict[str, Any]:
        return {}

    def look(self, lease: Lease) -> Any:
        """In the claim's transaction, after the claim: read what the decision needs,
        nothing written; the result's ``needs_call`` says whether the outside must be told."""
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
        calls ``commit``. Its first write must be ``insert_fenced``: a refusal there writes
        nothing (``run_together`` relies on it, to need no savepoint)."""
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
        told = getattr(exc, "told_in_vain", None)  # set by _taking_back: overtaken after a call
        if told is not None:
            refusal.told_in_vain, refusal.cancellation = told, exc.cancellation
        return refusal


LOCKING_REFUSALS = (LockHeld, StaleFencingToken, LeaseLost, LockUnavailable)


@dataclass
class _Attempt:
    """One attempt of ``run_together``: its call, steps and lease, what its claim looked
    at, whom its call told, and its answer once it has one."""

    index: int
    call: Call
    steps: FencedSteps
    leased: LeasedAttempt
    granted_at: float  # time.monotonic() of its grant, or of its lease's last extension
    looked: Any = None
    told: Any = None
    result: Any = None
    refused: Exception | None = None


def run_together(calls: list[tuple[Call, FencedSteps]]) -> list:
    """Attempts of one operation on different resources, committed together; return each
    one's result or refusal (not raised), in order.

    For a batch whose rows are mostly new, as the month start's chunk: one ``BEGIN`` and
    one durable ``COMMIT`` for many claims, and another for their writes, instead of two
    each. Each attempt runs ``Call.run``'s steps under its own lease
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
    Redis counter went behind runs again alone (``Call.run`` recovers from it). Anything
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
                claim_fence(lease)  # refused: nothing written
                attempt.looked = attempt.steps.look(lease)  # reads only
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
        if attempt.looked.needs_call:
            lease = attempt.leased.lease
            try:
                attempt.told = _call_outside(attempt.steps, attempt.call, lease, attempt.looked)
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
    steps, lease, looked, told = attempt.steps, attempt.leased.lease, attempt.looked, attempt.told
    try:
        with _taking_back(steps, lease, looked, told):
            result = steps.create(lease, looked, told)
    except StaleFencingToken as stale:  # insert_fenced refused it: nothing was written
        attempt.refused = stale
        return
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


def _run_steps(steps: FencedSteps, call: Call, lease: Lease):
    """The steps in their order, under ``lease`` (``run_fenced``'s work)."""
    claim_fence(lease)  # one statement, committed on its own: durable before any call
    looked = steps.look(lease)  # after the claim: every older holder's commit is visible
    told = _call_outside(steps, call, lease, looked) if looked.needs_call else None
    with _taking_back(steps, lease, looked, told), transaction.atomic():
        return _commit_steps(steps, lease, looked, told)


def _commit_steps(steps: FencedSteps, lease: Lease, looked, told):
    """In the commit's transaction: ``create``, else the fence and ``commit``; the audit
    row commits with the writes."""
    result = steps.create(lease, looked, told)  # the fenced row is new: one statement
    if result is None:
        advance_fence(steps.fence_row(looked), lease)  # the same grant: passes unless overtaken
        result = steps.commit(lease, looked, told)
    lease.record_committed(result.outcome)
    return result


@contextmanager
def _taking_back(steps: FencedSteps, lease: Lease, looked, told) -> Iterator[None]:
    """A refusal raised in the block after the outside was told says so, and the steps'
    ``take_back`` sends the best-effort cancellation: the operation's own refusals and
    locking's alike (a newer holder's claim refused this one at the fence, the lease was
    lost), which ``Call.refusal`` turns into the shared refusals with whom they told."""
    try:
        yield
    except (Refusal, StaleFencingToken, LeaseLost) as refusal:
        if told is not None:  # rolled back, but the outside was told: say so, take it back
            refusal.told_in_vain = told  # type: ignore[union-attr]
            refusal.cancellation = steps.take_back(lease, looked, refusal)  # type: ignore[union-attr]
        raise


def _call_outside(steps: FencedSteps, call: Call, lease: Lease, looked):
    lease.check()  # not worth a call if the lease is lost or uncertain: LeaseLost
    try:
        with span("external-call", lease=lease, attributes={"endpoint": steps.endpoint}):
            return steps.call_outside(lease, looked)
    except ExternalCallFailed as exc:
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
            party=steps.party,
            **steps.subject,
        ) from exc
