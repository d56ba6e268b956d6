"""A granted lease: what its holder can know of it, and the sync lease's release, extend and
keep-alive.

The sync ``Lease`` (here) and the ``AsyncLease`` (locking/asyncio/lease.py) talk to Redis each
their own way and tell their ``LeaseLife`` what Redis answered; it keeps the rest: the
deadlines, the doubt (HELD, UNCERTAIN, LOST, RELEASED: the table is on the "Fence epochs" page,
"Lease states") and the lost signal (``LostSignal``). Both are a ``BaseLease``, which reads
that state only. ``Lease`` releases and extends itself with the lock's registered scripts
(compare-and-delete, compare-and-pexpire on its own lock value), so it can never touch
another holder's lease; ``KeepAlive`` is the thread ``lease.keep_alive()`` renews it from.
None of this is the safety, which is the fencing token checked by ``advance_fence``; it is
what the holder can know.
"""

import functools
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, Self, TypeVar

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisError

from locking import tracing
from locking.exceptions import LeaseLost, LeaseUncertain
from locking.keys import FencingToken, from_ms, lock_key, positive_ms, require_timedelta
from locking.outcomes import LeaseState, LossCause, Outcome
from locking.scripts import Scripts, run_script

R = TypeVar("R")

# The lease's own log: what an operator filters on.
logger = logging.getLogger(__name__)

TTL_PASSED = "its TTL passed by this process's clock"


# -- the lost signal: ``lease.lost`` ------------------------------------------------------
#
# A ``threading.Event`` set at most once. A lease's ``LeaseLife`` owns one; the keep-alives and
# ``check()`` set it when the lease is ``LOST``, its release sets it quietly, and the
# callbacks registered with ``on_lost`` run once, on a loss only. It knows the lease by its
# resource and token (what it logs and counts): the callbacks come bound to the lease.


# Guards the lazy creation of every signal, and of every signal's condition
# (LeaseLife.lost; LostSignal._cond, _set_flag).
SIGNAL_CONDITIONS = threading.Lock()


class LostSignal(threading.Event):
    """Set once a lease is no longer its holder's: ``lease.lost.is_set()``, ``.wait()``.

    A ``threading.Event`` that is set at most once and never cleared, with the ``reason``
    it was set. ``bool(lease.lost)`` is ``is_set()``, as the boolean ``lost`` it replaces
    was, so ``if lease.lost:`` keeps its meaning. Callbacks registered with
    ``Lease.on_lost`` run once when the lease is lost; never when its holder released it
    first (that is the end of the work, not a loss).
    """

    def __init__(self, resource: str, token: int):
        # Not ``Event.__init__``: its ``Condition`` is built on first use (``_cond``), since
        # most leases are released without anyone ever waiting on their signal, and a
        # Condition per lease is a measurable part of a lock cycle.
        self._flag = False
        self.reason = ""
        self._guard = threading.Lock()
        self.resource = resource
        self.token = token
        self._callbacks: list[Callable[[], object]] = []
        self._fired = False  # the callbacks ran
        self._quiet = False  # released by its holder: there is no loss to report

    @property
    def _cond(self) -> threading.Condition:
        """The Event's condition, made by the first waiter or setter that needs it."""
        cond = self.__dict__.get("_lazy_cond")
        if cond is None:
            with SIGNAL_CONDITIONS:
                cond = self.__dict__.setdefault("_lazy_cond", threading.Condition(threading.Lock()))
        return cond

    def _set_flag(self) -> None:
        """``Event.set`` without making a condition that nobody waits on: with none made
        (under the guard that makes them), no thread can be waiting, so the flag alone
        will do; a waiter that comes later reads it."""
        with SIGNAL_CONDITIONS:
            if "_lazy_cond" not in self.__dict__:
                self._flag = True
                return
        super().set()

    def __bool__(self) -> bool:
        return self._flag

    def __repr__(self) -> str:
        return f"<LostSignal {'set: ' + self.reason if self.is_set() else 'not set'}>"

    def set(self) -> None:
        """Mark the lease lost by hand (e.g. the work learned it elsewhere)."""
        if self._mark("marked lost by its holder", notify=True):
            tracing.lease_lost(self.resource, LossCause.MARKED)

    def clear(self) -> None:
        raise RuntimeError("a lost lease stays lost: acquire a new one")

    @property
    def released(self) -> bool:
        """Whether the holder released the lease (set quietly, no loss to report)."""
        return self._quiet

    def _mark(self, reason: str, *, notify: bool) -> bool:
        """Set the signal once; with ``notify``, run the callbacks, each once. Return
        whether this call set it."""
        with self._guard:
            newly = not self._flag
            if newly:
                self.reason = reason
                self._set_flag()
            if not notify:
                self._quiet = True
                return newly
            if self._quiet or self._fired:
                return newly
            self._fired = True
            callbacks = list(self._callbacks)
        for callback in callbacks:
            self._run(callback)
        return newly

    def _add_callback(self, callback: Callable[[], object]) -> None:
        """Run ``callback()`` once on a loss (at once if there was one): ``on_lost``'s,
        bound to its lease."""
        with self._guard:
            self._callbacks.append(callback)
            run_now = self._fired
        if run_now:
            self._run(callback)

    def _run(self, callback: Callable[[], object]) -> None:
        try:
            callback()
        except Exception:  # a callback's bug must not stop the keep-alive that called it
            logger.exception(
                "on_lost callback failed", extra={"resource": self.resource, "token": self.token}
            )


class LeaseLife:
    """What a lease holds while it lives: its state as its holder can know it (its deadlines,
    its doubt, its lost signal, whether it was released; the module docstring).

    Built on every grant, so a plain class with slots: ``lost`` (an Event with its lock) is
    made when first asked for and ``expires_at`` (a ``datetime``) when first read; most
    leases are released without either being looked at.
    """

    __slots__ = (
        "_expires_at",
        "_expires_ms",
        "_lost",
        "deadline",
        "doubt",
        "expired_by",
        "lost_before_release",
        "released",
        "resource",
        "token",
        "ttl",
    )

    # Positional: built inside every grant's lease, where five keywords cost a fifth of a
    # µs (measured); only BaseLease builds one.
    def __init__(self, resource: str, token: int, ttl: timedelta, started: float, expires_ms: int):
        self.resource = resource
        self.token = token
        # The TTL last granted or extended: what a keep-alive renews to by default.
        self.ttl = ttl
        ttl_s = ttl.total_seconds()
        # Counted from before the request was sent, the lease is surely still ours until
        # ``deadline`` (never later than Redis's own expiry); counted from the reply, it is
        # surely gone after ``expired_by``.
        self.deadline = started + ttl_s
        self.expired_by = time.monotonic() + ttl_s
        # Redis's expiry in epoch ms: ``expires_at`` is made from it when first read.
        self._expires_ms = expires_ms
        self._expires_at: datetime | None = None
        # Why the holder cannot know (the last renewal's error); None while renewals answer.
        self.doubt: str | None = None
        self.released = False  # by its holder: then RELEASED, with no loss to report
        self.lost_before_release = False  # a loss known before the release: LOST stays
        self._lost: LostSignal | None = None

    @property
    def expires_at(self) -> datetime:
        """When Redis expires the lease (Redis's clock), as of the last grant or extend."""
        expires_at = self._expires_at
        if expires_at is None:
            expires_at = self._expires_at = from_ms(self._expires_ms)
        return expires_at

    @property
    def lost(self) -> LostSignal:
        """The ``LostSignal``, made on first use (set if the lease was released)."""
        signal = self._lost
        if signal is None:
            with SIGNAL_CONDITIONS:
                signal = self._lost
                if signal is None:
                    signal = self._lost = LostSignal(self.resource, self.token)
            # A release that ran while it was being made finds it, or is seen here.
            if self.released:
                signal._mark("released", notify=False)
        return signal

    @property
    def state(self) -> LeaseState:
        """``HELD``, ``UNCERTAIN``, ``LOST`` or ``RELEASED``; read past the TTL, the lease
        becomes ``LOST`` (and the ``on_lost`` callbacks run, once)."""
        if self.released:
            return LeaseState.LOST if self.lost_before_release else LeaseState.RELEASED
        if self._lost is not None and self._lost._flag:
            return LeaseState.LOST
        now = time.monotonic()
        if now < self.deadline and self.doubt is None:
            return LeaseState.HELD
        if now >= self.expired_by:
            self.lose(
                f"{TTL_PASSED} ({self.doubt})" if self.doubt else TTL_PASSED,
                cause=LossCause.TTL_PASSED,
            )
            return LeaseState.LOST
        return LeaseState.UNCERTAIN

    def check(self) -> None:
        """Raise ``LeaseLost`` unless ``HELD`` (``LeaseUncertain`` while uncertain; the
        reason ``released`` once released)."""
        state = self.state
        if state is LeaseState.HELD:
            return
        if state.is_over:
            raise LeaseLost(self.resource, self.token, self.lost.reason)
        reason = self.doubt or "its TTL may have passed by this process's clock"
        raise LeaseUncertain(self.resource, self.token, reason)

    def renewed(
        self, extended: bool, ttl: timedelta, started: float, *, error: Exception | None = None
    ) -> bool:
        """Take an extend's answer, sent at ``started``: ``extended`` (Redis reset the TTL
        to ``ttl``), refused (not ours: ``LOST``), or ``error`` (no answer: ``UNCERTAIN``).
        Returns ``extended``."""
        if extended:
            self.ttl = ttl
            # Counted from the request (surely still ours) and from the reply (surely gone).
            self.deadline = started + ttl.total_seconds()
            self.expired_by = time.monotonic() + ttl.total_seconds()
            self._expires_at = datetime.now(tz=UTC) + ttl
            if self.doubt is not None:
                self.doubt = None
                logger.info(
                    "lease held again", extra={"resource": self.resource, "token": self.token}
                )
        elif error is not None:
            if self.doubt is None:
                tracing.lease_uncertain(self.resource)
            self.doubt = f"extend failed: {error}"
            logger.warning(
                "lease uncertain: could not extend it",
                extra={"resource": self.resource, "token": self.token, "error": str(error)},
            )
        else:
            self.lose(
                "extend refused: the lease expired or has another holder", cause=LossCause.REFUSED
            )
        return extended

    def lose(self, reason: str, *, cause: LossCause) -> None:
        """Mark the lease ``LOST`` (once: logged, counted by ``cause``, callbacks run)."""
        if self.lost._mark(reason, notify=True):
            logger.warning(
                "lease lost: %s",
                reason,
                extra={"resource": self.resource, "token": self.token, "outcome": Outcome.LOST},
            )
            tracing.lease_lost(self.resource, cause)

    def end(self) -> None:
        """The holder releases the lease: ``RELEASED`` from now on (``LOST`` if it was lost
        before), quietly (no loss to log, count or call back). The first release observes
        how long the work ran past the TTL, counted from before the last confirmed grant or
        extend."""
        if not self.released:
            self.lost_before_release = self._lost is not None and self._lost._flag
            overrun = time.monotonic() - self.deadline
            if overrun > 0:
                tracing.lease_overran(self.resource, overrun)
        self.released = True
        signal = self._lost
        if signal is not None:  # if one is being made right now, it reads ``released``
            signal._mark("released", notify=False)

    def renewal_pause(self, ttl: timedelta) -> float:
        """Seconds until a keep-alive renews: a third of the TTL while ``HELD``, a ninth
        while ``UNCERTAIN`` (to be ``HELD`` again soon after Redis answers), and never past
        the moment the TTL surely passes, so that a loss is reported then."""
        pause = ttl.total_seconds() / (3 if self.doubt is None else 9)
        return max(min(pause, self.expired_by - time.monotonic()), 0.0)

    def renewal_ttl(self, ttl: timedelta | None) -> timedelta:
        """What a keep-alive renews to: ``ttl``, by default the TTL last granted or
        extended. Not the time left: that would shrink with every late call, and
        ``expires_at`` comes from Redis's clock, which this host's may not agree with."""
        if ttl is None:
            return self.ttl
        require_timedelta(ttl)
        if ttl.total_seconds() <= 0:
            raise ValueError("keep_alive needs a positive ttl")
        return ttl


class AnyGrantingLock(Protocol):
    """What a lease, sync or async, reads of the lock that granted it: the database of its
    fence (``GrantingLock`` and ``AsyncGrantingLock`` add what each API releases with)."""

    @property
    def using(self) -> str: ...


class BaseLease:
    """What a granted lease is, whichever API granted it: its name, token and owner, its
    state (``LeaseLife``), its audit hook. ``Lease`` adds the sync release, extend and
    keep-alive, ``AsyncLease`` the async ones.

    Built by the lock on every grant, with keywords: ``value`` is the lock value the grant
    stored (what release and extend compare), ``started`` the monotonic time the grant's
    request was sent, ``expires_ms`` Redis's expiry (epoch ms), ``audit`` the hook
    ``record_committed`` calls (``FenceLock.acquire(audit=...)``).
    """

    __slots__ = ("__weakref__", "_life", "_lock", "_value", "audit", "owner", "resource", "token")

    def __init__(
        self,
        *,
        resource: str,
        token: int,
        owner: str,
        value: str,
        lock: AnyGrantingLock,
        ttl: timedelta,
        started: float,
        expires_ms: int,
        audit: "AuditHook | None" = None,
    ):
        self.resource = resource
        self.token = token
        self.owner = owner
        self.audit = audit
        self._value = value
        self._lock = lock
        self._life = LeaseLife(resource, token, ttl, started, expires_ms)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(resource={self.resource!r}, token={self.token!r}, "
            f"owner={self.owner!r}, expires_at={self.expires_at!r}, lost={self.lost!r})"
        )

    @property
    def expires_at(self) -> datetime:
        """When Redis expires the lease (Redis's clock), as of the last grant or extend."""
        return self._life.expires_at

    @property
    def fencing_token(self) -> FencingToken:
        """What the fence checks (resource, token, this grant's owner id, the lock's
        database), as a value: every entry point that takes a token takes this or the lease."""
        return FencingToken(self.resource, self.token, self.owner, self._lock.using)

    @property
    def lost(self) -> LostSignal:
        """A ``threading.Event`` set the moment the lease is ``LOST``, and when released."""
        return self._life.lost

    @property
    def state(self) -> LeaseState:
        """``HELD``, ``UNCERTAIN`` or ``LOST``, by what Redis last said and this process's
        monotonic clock. Reading it past the TTL makes the lease ``LOST`` (and runs the
        ``on_lost`` callbacks, once) — as ``check()`` and the keep-alives do."""
        return self._life.state

    @property
    def probably_valid(self) -> bool:
        """Whether the lease is ``HELD``: a hint for skipping doomed work, never a safety
        check (the fence is that)."""
        return self._life.state is LeaseState.HELD

    def on_lost(self, callback: Callable[[Self], R]) -> Callable[[Self], R]:
        """Call ``callback(lease)`` once when the lease is lost; at once if it already is.

        The callback runs in the thread (or event loop) that noticed the loss — a
        keep-alive's, or the caller of ``extend``/``check`` — so it must be quick: set a
        flag, cancel a request, signal a worker. A release by the holder is not a loss
        and calls nothing. Returns ``callback``, so it can decorate a function.
        """
        self._life.lost._add_callback(functools.partial(callback, self))
        return callback

    def record_committed(self, outcome: Outcome = Outcome.COMMITTED) -> None:
        """Record this attempt's outcome now, inside the work's ``transaction.atomic()``.

        Under ``run_fenced``, the lease's fence has written the attempt's row in its own
        statement, as committed: ``COMMITTED`` then writes nothing, and another outcome
        (``ALREADY_DONE``) updates that row. Without a fence of the lease in the block
        (or one given ``lease.fencing_token``), it inserts the row. Either way the row
        commits (or rolls back) with the writes it records; if the block rolls back,
        ``run_fenced`` records the attempt's final outcome outside. Outside
        ``run_fenced`` it does nothing.
        """
        if self.audit is not None:
            self.audit(outcome, self)

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease is ``HELD``: ``LeaseUncertain`` (a
        ``LeaseLost``) while the holder cannot know, ``LeaseLost`` once it is lost.

        Call it before a step that costs something (an external call, a long
        computation): a lost lease's write would be refused by the fence anyway, and an
        uncertain one's might be.
        """
        self._life.check()


# A lease's audit hook: ``hook(outcome, lease)`` records the attempt's outcome (``run_fenced``'s
# ``AttemptAudit``, whose row the lease's fence writes); ``BaseLease.record_committed`` calls it.
AuditHook = Callable[[Outcome, BaseLease], object]


# -- the sync lease -------------------------------------------------------------------------


class GrantingLock(AnyGrantingLock, Protocol):
    """What a lease uses of the ``FenceLock`` that granted it: its client and scripts, to
    release and extend; its database, for the fence. (A protocol, not the class: the lock
    imports this module, so this one does not import the lock.)"""

    @property
    def client(self) -> "redis.Redis | RedisCluster": ...

    @property
    def scripts(self) -> Scripts: ...


class Lease(BaseLease):
    """A granted lease. Use it as a context manager to release it on exit.

    ``state`` is ``HELD``, ``UNCERTAIN`` or ``LOST`` (``LeaseLife``, above). ``lost`` is a
    ``LostSignal`` (a ``threading.Event``): set the moment the lease is ``LOST`` and when it
    is released. ``check()`` raises ``LeaseLost`` (``LeaseUncertain`` while uncertain):
    call it before an expensive step. ``on_lost(callback)`` is told once of a loss (not of
    a release, nor of a doubt). None of this is the safety; the fence is.
    """

    __slots__ = ()
    _lock: GrantingLock

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> bool:
        """Delete the lock if it is still ours. False if it expired or was taken over.

        If Redis cannot be reached the lease is left to expire on its own (False). Sets
        ``lost`` (the lease is no longer usable) without calling ``on_lost`` callbacks.
        """
        self._life.end()
        if tracing.no_provider():  # the span only where a tracer is set (FenceLock.acquire)
            return _delete_if_ours(self)
        with tracing.operation_span("locking.release", self.resource, token=self.token) as span:
            released = _delete_if_ours(self)
            span.set_attribute(tracing.RELEASED, released)
        return released

    def extend(self, ttl: timedelta) -> bool:
        """Reset the lease's expiry to ``ttl`` from now if it is still ours.

        True: Redis extended it, and an ``UNCERTAIN`` lease is ``HELD`` again. False when
        it is not ours (``LOST``: ``lost`` set, ``on_lost`` called; a lease already lost
        sends nothing) or Redis did not answer (``UNCERTAIN`` until a renewal answers or
        the TTL surely passed).
        """
        ttl_ms = positive_ms(ttl)
        life = self._life
        if life.state.is_over:
            return False
        lock = self._lock
        started = time.monotonic()
        try:
            keys, args = (lock_key(self.resource),), (self._value, ttl_ms)
            extended = run_script(lock.client, lock.scripts.extend, keys, args) == 1
        except RedisError as exc:
            return life.renewed(False, ttl, started, error=exc)
        return life.renewed(extended, ttl, started)

    def keep_alive(self, ttl: timedelta | None = None) -> "KeepAlive":
        """Extend the lease every ttl/3 in a background thread while the block runs.

        A renewal that fails makes the lease ``UNCERTAIN`` within one interval plus the
        Redis socket timeout of a partition; the thread then tries every ttl/9, and the
        lease is ``HELD`` again at the first renewal Redis confirms, or ``LOST`` when the
        TTL surely passed (reported at that moment) or Redis says it is not ours.

        Use it for work whose length you cannot bound (a slow but healthy call); it keeps
        other workers from starting duplicate work. It does not make the holder safe: a
        paused process stops renewing, loses the lease, and only the fence check then
        keeps its late write out.

        ``ttl`` defaults to the TTL the lease was granted (or last extended) with. Not the
        time left: that would shrink with every late call, and ``expires_at`` comes from
        Redis's clock, which this host's clock may not agree with.
        """
        return KeepAlive(self, self._life.renewal_ttl(ttl))


def _delete_if_ours(lease: Lease) -> bool:
    """The release script on ``lease``'s lock key and value: True if it deleted it, False if
    the key is gone or another's, or Redis did not answer (the lease then expires)."""
    lock = lease._lock
    try:
        keys, args = (lock_key(lease.resource),), (lease._value,)
        return run_script(lock.client, lock.scripts.release, keys, args) == 1
    except RedisError as exc:
        logger.warning(
            "could not release lease; it will expire",
            extra={"resource": lease.resource, "token": lease.token, "error": str(exc)},
        )
        return False


class KeepAlive:
    """Background renewal of a lease, in a thread, until the block ends or the lease is lost.

    A renewal that fails leaves the lease ``UNCERTAIN`` and the thread trying again; one
    that Redis refuses, or the TTL surely passing, makes it ``LOST`` and stops the thread.
    """

    def __init__(self, lease: Lease, ttl: timedelta):
        self.lease = lease
        self.ttl = ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"keep-alive {lease.resource}", daemon=True
        )

    def __enter__(self) -> Lease:
        self._thread.start()
        return self.lease

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        lease = self.lease
        while not self._stop.wait(lease._life.renewal_pause(self.ttl)):
            if not lease.state.is_over and lease.extend(self.ttl):
                continue
            if lease.state is LeaseState.RELEASED:
                return  # released inside the block: nothing left to keep
            if lease.state is LeaseState.LOST:
                logger.warning(
                    "lease lost during keep-alive",
                    extra={"resource": lease.resource, "token": lease.token},
                )
                return
