"""A lease's tenure: the TTL it is held for and what its holder can know of it.

The sync ``Lease`` (locking/lease.py) and the ``AsyncLease`` (locking/asyncio/lease.py)
talk to Redis each their own way and tell their ``Tenure`` what Redis answered; the tenure
keeps the rest: the deadlines, the doubt, the lost signal. Both are a ``BaseLease``, which
reads that state and nothing else, so neither carries the other's I/O.

``lease.state`` says it honestly (ZooKeeper's clients call the middle one SUSPENDED)::

    HELD ──renewal fails, Redis unreachable──▶ UNCERTAIN ──renewal reaches Redis──▶ HELD
      │                                            │
      └──Redis: another owner / TTL surely passed──┴──▶ LOST   (final; on_lost runs once)
    HELD or UNCERTAIN ──release()──▶ RELEASED   (final; no on_lost)

- ``HELD``: the last grant or extend was confirmed, and its TTL, counted from before the
  request was sent, has not run out by this process's monotonic clock.
- ``UNCERTAIN``: a renewal failed or Redis did not answer, or the TTL may just have run
  out (counted from the request, not yet from the reply): the lease may still run.
- ``LOST``: Redis says the lease is not ours (another owner, or none), or the TTL has
  surely passed (counted from the reply of the last confirmed grant or extend). Never
  left; a release after it leaves it ``LOST`` (the loss is what happened).
- ``RELEASED``: its holder released it (``release()``, the end of its ``with`` block) before
  any loss was known. Never left.

``check()`` raises ``LeaseLost`` on ``LOST`` and ``RELEASED``, and ``LeaseUncertain`` (a
``LeaseLost``) on ``UNCERTAIN``, so nothing goes out while the holder cannot know. None
of this is the safety, which is the fencing token checked by ``advance_fence``; it is what
the holder can know.

A TTL is a ``timedelta`` wherever one is taken (``acquire``, ``extend``, ``keep_alive``,
``run_fenced``, ``LeasedAttempt``, and their async twins): a bare number would be seconds
to one reader and milliseconds to another, and failed deep inside as an AttributeError.
"""

import functools
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, Self, TypeVar

from locking import metrics
from locking.exceptions import LeaseLost, LeaseUncertain
from locking.keys import from_ms
from locking.outcomes import LeaseState, LossCause, Outcome
from locking.signal import SIGNAL_CONDITIONS, LostSignal
from locking.tokens import FencingToken

R = TypeVar("R")

# The lease's own log, whichever module writes it: what an operator filters on.
logger = logging.getLogger("locking.lease")

TTL_TYPE_ERROR = "ttl must be a datetime.timedelta, e.g. timedelta(seconds=5)"
TTL_PASSED = "its TTL passed by this process's clock"


def require_timedelta(ttl: object) -> None:
    """Raise ``TypeError`` unless ``ttl`` is a ``timedelta``."""
    if not isinstance(ttl, timedelta):
        raise TypeError(TTL_TYPE_ERROR)


def positive_ms(ttl: timedelta) -> int:
    """``ttl`` in whole milliseconds, as Redis takes it; ``ValueError`` unless positive."""
    require_timedelta(ttl)
    ttl_ms = int(ttl.total_seconds() * 1000)
    if ttl_ms <= 0:
        raise ValueError("ttl must be positive")
    return ttl_ms


def ttl_ms_of(ttl: timedelta) -> int:
    """``positive_ms``, remembered per TTL (a deployment uses a handful)."""
    try:
        return _TTL_MS[ttl]
    except (KeyError, TypeError):
        ttl_ms = positive_ms(ttl)
        if len(_TTL_MS) < 256:
            _TTL_MS[ttl] = ttl_ms
        return ttl_ms


_TTL_MS: dict[timedelta, int] = {}


@functools.lru_cache(maxsize=64)
def ttl_of(ttl_ms: int) -> timedelta:
    """``timedelta(milliseconds=ttl_ms)``, one per TTL a deployment uses, not one per grant."""
    return timedelta(milliseconds=ttl_ms)


class Tenure:
    """The state of one granted lease, as its holder can know it (the module docstring).

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
                metrics.lease_uncertain(self.resource)
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
            metrics.lease_lost(self.resource, cause)

    def end(self) -> None:
        """The holder releases the lease: ``RELEASED`` from now on (``LOST`` if it was lost
        before), quietly (no loss to log, count or call back). The first release observes
        how long the work ran past the TTL, counted from before the last confirmed grant or
        extend."""
        if not self.released:
            self.lost_before_release = self._lost is not None and self._lost._flag
            overrun = time.monotonic() - self.deadline
            if overrun > 0:
                metrics.lease_overran(self.resource, overrun)
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


class Granter(Protocol):
    """What a lease reads of the lock that granted it: the database of its fence."""

    @property
    def using(self) -> str: ...


class BaseLease:
    """What a granted lease is, whichever API granted it: its name, token and owner, its
    state (``Tenure``), its audit hook. ``Lease`` adds the sync release, extend and
    keep-alive, ``AsyncLease`` the async ones.

    Built by the lock on every grant, with keywords: ``value`` is the lock value the grant
    stored (what release and extend compare), ``started`` the monotonic time the grant's
    request was sent, ``expires_ms`` Redis's expiry (epoch ms), ``audit`` the hook
    ``record_committed`` calls (``FenceLock.acquire(audit=...)``).
    """

    __slots__ = ("__weakref__", "_lock", "_tenure", "_value", "audit", "owner", "resource", "token")

    def __init__(
        self,
        *,
        resource: str,
        token: int,
        owner: str,
        value: str,
        lock: Granter,
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
        self._tenure = Tenure(resource, token, ttl, started, expires_ms)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(resource={self.resource!r}, token={self.token!r}, "
            f"owner={self.owner!r}, expires_at={self.expires_at!r}, lost={self.lost!r})"
        )

    @property
    def expires_at(self) -> datetime:
        """When Redis expires the lease (Redis's clock), as of the last grant or extend."""
        return self._tenure.expires_at

    @property
    def fencing_token(self) -> FencingToken:
        """What the fence checks (resource, token, this grant's owner id, the lock's
        database), as a value: every entry point that takes a token takes this or the lease."""
        return FencingToken(self.resource, self.token, self.owner, self._lock.using)

    @property
    def lost(self) -> LostSignal:
        """A ``threading.Event`` set the moment the lease is ``LOST``, and when released."""
        return self._tenure.lost

    @property
    def state(self) -> LeaseState:
        """``HELD``, ``UNCERTAIN`` or ``LOST``, by what Redis last said and this process's
        monotonic clock. Reading it past the TTL makes the lease ``LOST`` (and runs the
        ``on_lost`` callbacks, once) — as ``check()`` and the keep-alives do."""
        return self._tenure.state

    @property
    def probably_valid(self) -> bool:
        """Whether the lease is ``HELD``: a hint for skipping doomed work, never a safety
        check (the fence is that)."""
        return self._tenure.state is LeaseState.HELD

    def on_lost(self, callback: Callable[[Self], R]) -> Callable[[Self], R]:
        """Call ``callback(lease)`` once when the lease is lost; at once if it already is.

        The callback runs in the thread (or event loop) that noticed the loss — a
        keep-alive's, or the caller of ``extend``/``check`` — so it must be quick: set a
        flag, cancel a request, signal a worker. A release by the holder is not a loss
        and calls nothing. Returns ``callback``, so it can decorate a function.
        """
        self._tenure.lost._add_callback(functools.partial(callback, self))
        return callback

    def record_committed(self, outcome: Outcome = Outcome.COMMITTED) -> None:
        """Write this attempt's audit row now, inside the work's ``transaction.atomic()``.

        Under ``run_fenced``, a work that calls it just before its block commits saves the
        separate audit write after the transaction: the row commits (or rolls back) with
        the writes it records. If the block rolls back, ``run_fenced`` records the
        attempt's final outcome outside, as without this call. Outside ``run_fenced`` it
        does nothing.
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
        self._tenure.check()


# A lease's audit hook: ``hook(outcome, lease)`` writes the attempt's row (``run_fenced``'s
# ``AttemptAudit.in_transaction``); ``BaseLease.record_committed`` calls it.
AuditHook = Callable[[Outcome, BaseLease], object]
