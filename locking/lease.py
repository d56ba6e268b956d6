"""A granted lease: release, extend, keep alive, its state and the signal that it was lost.

``FenceLock.acquire`` (locking/lock.py) grants a ``Lease``; the lease releases and extends
itself with the same registered scripts (compare-and-delete, compare-and-pexpire on its own
lock value), so it can never touch another holder's lease. None of this is the safety,
which is the fencing token checked by ``advance_fence``; it is what the holder can know.

``lease.state`` says it honestly (ZooKeeper's clients call the middle one SUSPENDED)::

    HELD ──renewal fails, Redis unreachable──▶ UNCERTAIN ──renewal reaches Redis──▶ HELD
      │                                            │
      └──Redis: another owner / TTL surely passed──┴──▶ LOST   (final; on_lost runs once)

- ``HELD``: the last grant or extend was confirmed, and its TTL, counted from before the
  request was sent, has not run out by this process's monotonic clock.
- ``UNCERTAIN``: a renewal failed or Redis did not answer, or the TTL may just have run
  out (counted from the request, not yet from the reply): the lease may still run.
- ``LOST``: Redis says the lease is not ours (another owner, or none), the holder released
  it, or the TTL has surely passed (counted from the reply of the last confirmed grant or
  extend). Never left.

``check()`` raises ``LeaseLost`` on ``LOST`` and ``LeaseUncertain`` (a ``LeaseLost``) on
``UNCERTAIN``, so nothing goes out while the holder cannot know.
"""

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from locking import metrics, tracing
from locking.aio import AsyncLeaseMixin
from locking.exceptions import LeaseLost, LeaseUncertain
from locking.keepalive import KeepAlive
from locking.keys import from_ms, lock_key
from locking.outcomes import LeaseState, LossCause, Outcome
from locking.scripts import run_script
from locking.signal import _SIGNAL_CONDITIONS, LostSignal
from locking.tenure import positive_ms, require_timedelta
from locking.tokens import FencingToken

if TYPE_CHECKING:
    from locking.lock import FenceLock

logger = logging.getLogger(__name__)

# A lease's audit hook: ``hook(outcome, lease)`` writes the attempt's row (``run_fenced``'s
# ``AttemptAudit.in_transaction``); ``Lease.record_committed`` calls it.
AuditHook = Callable[[Outcome, "Lease"], object]

TTL_PASSED = "its TTL passed by this process's clock"


class Lease(AsyncLeaseMixin):
    """A granted lease. Use it as a context manager to release it on exit.

    ``state`` is ``HELD``, ``UNCERTAIN`` or ``LOST`` (see the module docstring). ``lost``
    is a ``LostSignal`` (a ``threading.Event``): set the moment the lease is ``LOST`` and
    when it is released. ``check()`` raises ``LeaseLost`` (``LeaseUncertain`` while
    uncertain): call it before an expensive step. ``on_lost(callback)`` is told once of a
    loss (not of a release, nor of a doubt). None of this is the safety; the fence is.

    A plain class with slots, built on every grant: ``lost`` (an Event with its lock) is
    made when first asked for, and ``expires_at`` (a ``datetime``) when first read. Most
    leases are released without either being looked at, and building them was a third of
    a lock cycle's Python.
    """

    __slots__ = (
        "__weakref__",
        "_doubt",
        "_expired_by",
        "_expires_at",
        "_expires_ms",
        "_lock",
        "_lost",
        "_monotonic_deadline",
        "_released",
        "_ttl",
        "_value",
        "audit",
        "owner",
        "resource",
        "token",
    )

    def __init__(
        self,
        resource: str,
        token: int,
        owner: str,
        expires_at: datetime | None = None,
        _lock: "FenceLock | None" = None,
        _value: str = "",
        # Until then the lease is surely still ours (unless broken): the last confirmed
        # grant or extend's TTL, counted from before its request was sent.
        _monotonic_deadline: float = 0.0,
        lost: LostSignal | None = None,
        # The TTL last granted or extended: what keep_alive() renews to by default.
        _ttl: timedelta | None = None,
        # What record_committed() calls: given by the grant (FenceLock.acquire(audit=...)).
        audit: "AuditHook | None" = None,
        # From then on it is surely gone: the same TTL counted from the reply (default: as
        # above).
        _expired_by: float | None = None,
        # Why the holder cannot know (the last renewal's error); None while renewals answer.
        _doubt: str | None = None,
        # Redis's expiry in epoch ms: ``expires_at`` is made from it when first read.
        _expires_ms: int | None = None,
    ):
        self.resource = resource
        self.token = token
        self.owner = owner
        self._expires_at = expires_at
        self._expires_ms = _expires_ms
        self._lock = _lock
        self._value = _value
        self._monotonic_deadline = _monotonic_deadline
        self._ttl = _ttl
        self.audit = audit
        self._expired_by = _monotonic_deadline if _expired_by is None else _expired_by
        self._doubt = _doubt
        self._released = False  # by its holder: then LOST, with no loss to report
        self._lost = None
        if lost is not None:
            lost._lease = self
            self._lost = lost

    def __repr__(self) -> str:
        return (
            f"Lease(resource={self.resource!r}, token={self.token!r}, owner={self.owner!r}, "
            f"expires_at={self.expires_at!r}, lost={self.lost!r})"
        )

    @property
    def expires_at(self) -> datetime:
        """When Redis expires the lease (Redis's clock), as of the last grant or extend."""
        expires_at = self._expires_at
        if expires_at is None and self._expires_ms is not None:
            expires_at = self._expires_at = from_ms(self._expires_ms)
        return expires_at

    @expires_at.setter
    def expires_at(self, value: datetime) -> None:
        self._expires_at = value

    @property
    def fencing_token(self) -> FencingToken:
        """What the fence checks (resource, token, this grant's owner id, the lock's
        database), as a value: every entry point that takes a token takes this or the lease."""
        using = self._lock.using if self._lock is not None else None
        return FencingToken(self.resource, self.token, self.owner, using)

    @property
    def lost(self) -> LostSignal:
        """The ``LostSignal`` of this lease, made on first use (set if already released)."""
        signal = self._lost
        if signal is None:
            with _SIGNAL_CONDITIONS:
                signal = self._lost
                if signal is None:
                    signal = LostSignal()
                    signal._lease = self
                    self._lost = signal
            # A release that ran while it was being made finds it, or is seen here.
            if self._released:
                signal._mark("released", notify=False)
        return signal

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    @property
    def state(self) -> LeaseState:
        """``HELD``, ``UNCERTAIN`` or ``LOST``, by what Redis last said and this process's
        monotonic clock. Reading it past the TTL makes the lease ``LOST`` (and runs the
        ``on_lost`` callbacks, once) — as ``check()`` and the keep-alives do."""
        if self._released or (self._lost is not None and self._lost._flag):
            return LeaseState.LOST
        now = time.monotonic()
        if now < self._monotonic_deadline and self._doubt is None:
            return LeaseState.HELD
        if now >= self._expired_by:
            reason = f"{TTL_PASSED} ({self._doubt})" if self._doubt else TTL_PASSED
            self._mark_lost(reason, cause=LossCause.TTL_PASSED)
            return LeaseState.LOST
        return LeaseState.UNCERTAIN

    @property
    def probably_valid(self) -> bool:
        """Whether the lease is ``HELD``: a hint for skipping doomed work, never a safety
        check (the fence is that)."""
        return self.state is LeaseState.HELD

    # -- the lease-lost signal -----------------------------------------------------------

    def on_lost(self, callback: Callable[["Lease"], object]) -> Callable[["Lease"], object]:
        """Call ``callback(lease)`` once when the lease is lost; at once if it already is.

        The callback runs in the thread (or event loop) that noticed the loss — a
        keep-alive's, or the caller of ``extend``/``check`` — so it must be quick: set a
        flag, cancel a request, signal a worker. A release by the holder is not a loss
        and calls nothing. Returns ``callback``, so it can decorate a function.
        """
        self.lost._add_callback(callback)
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
        state = self.state
        if state is LeaseState.HELD:
            return
        if state is LeaseState.LOST:
            raise LeaseLost(self.resource, self.token, self.lost.reason)
        reason = self._doubt or "its TTL may have passed by this process's clock"
        raise LeaseUncertain(self.resource, self.token, reason)

    def _mark_lost(
        self, reason: str, *, cause: LossCause | None = None, notify: bool = True
    ) -> None:
        """Mark the lease ``LOST`` (``cause``: how, counted) or, without ``notify``, released."""
        if self.lost._mark(reason, notify=notify) and notify:
            logger.warning(
                "lease lost: %s",
                reason,
                extra={"resource": self.resource, "token": self.token, "outcome": Outcome.LOST},
            )
            metrics.lease_lost(self.resource, cause or LossCause.REFUSED)

    def _done_with(self) -> None:
        """The holder is done with the lease (its first release): observe how long its
        work ran past the TTL, counted from before the last confirmed grant or extend."""
        if self._released:
            return
        overrun = time.monotonic() - self._monotonic_deadline
        if overrun > 0:
            metrics.lease_overran(self.resource, overrun)

    # -- release and extend --------------------------------------------------------------

    def release(self) -> bool:
        """Delete the lock if it is still ours. False if it expired or was taken over.

        If Redis cannot be reached the lease is left to expire on its own (False). Sets
        ``lost`` (the lease is no longer usable) without calling ``on_lost`` callbacks.
        """
        if not self._released:  # _done_with(), inlined: the first release observes
            overrun = time.monotonic() - self._monotonic_deadline
            if overrun > 0:
                metrics.lease_overran(self.resource, overrun)
        if tracing.no_provider():  # the usual case: no span to open, not even a no-op one
            try:
                lock = self._lock
                released = (
                    run_script(
                        lock.client,
                        lock.scripts.release,
                        (lock_key(self.resource),),
                        (self._value,),
                    )
                    == 1
                )
            except RedisError as exc:
                self._release_failed(exc)
                released = False
        else:
            with tracing.operation_span("locking.release", self.resource, token=self.token) as span:
                released = self._release()
                span.set_attribute(tracing.RELEASED, released)
        # Released by its holder: LOST from now on, quietly (no loss to log, count or call
        # back); see _set_released.
        self._released = True
        signal = self._lost
        if signal is not None:
            signal._mark("released", notify=False)
        return released

    def _release(self) -> bool:
        try:
            return (
                self._lock.scripts.release(keys=(lock_key(self.resource),), args=(self._value,))
                == 1
            )
        except RedisError as exc:
            self._release_failed(exc)
            return False

    def _set_released(self) -> None:
        """The holder released the lease: ``LOST`` from now on, quietly (no loss to log,
        count or call back). The signal, if made yet, is set; if one is being made in
        another thread right now, it reads ``_released`` after it is stored (``lost``)."""
        self._released = True
        signal = self._lost
        if signal is not None:
            signal._mark("released", notify=False)

    def _release_failed(self, exc: Exception) -> None:
        logger.warning(
            "could not release lease; it will expire",
            extra={"resource": self.resource, "token": self.token, "error": str(exc)},
        )

    def extend(self, ttl: timedelta) -> bool:
        """Reset the lease's expiry to ``ttl`` from now if it is still ours.

        True: Redis extended it, and an ``UNCERTAIN`` lease is ``HELD`` again. False when
        it is not ours (``LOST``: ``lost`` set, ``on_lost`` called; a lease already lost
        sends nothing) or Redis did not answer (``UNCERTAIN`` until a renewal answers or
        the TTL surely passed).
        """
        ttl_ms = positive_ms(ttl)
        if self.state is LeaseState.LOST:
            return False
        started = time.monotonic()
        try:
            extended = bool(
                self._lock.scripts.extend(
                    keys=[lock_key(self.resource)], args=[self._value, ttl_ms]
                )
            )
        except RedisError as exc:
            return self._extended(False, ttl, started, error=exc)
        return self._extended(extended, ttl, started)

    def _extended(
        self, extended: bool, ttl: timedelta, started: float, *, error: Exception | None = None
    ) -> bool:
        if extended:
            self._ttl = ttl
            # Counted from the request (surely still ours) and from the reply (surely gone).
            self._monotonic_deadline = started + ttl.total_seconds()
            self._expired_by = time.monotonic() + ttl.total_seconds()
            self.expires_at = datetime.now(tz=UTC) + ttl
            if self._doubt is not None:
                self._doubt = None
                logger.info(
                    "lease held again", extra={"resource": self.resource, "token": self.token}
                )
        elif error is not None:
            if self._doubt is None:
                metrics.lease_uncertain(self.resource)
            self._doubt = f"extend failed: {error}"
            logger.warning(
                "lease uncertain: could not extend it",
                extra={"resource": self.resource, "token": self.token, "error": str(error)},
            )
        else:
            self._mark_lost(
                "extend refused: the lease expired or has another holder", cause=LossCause.REFUSED
            )
        return extended

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
        return KeepAlive(self, self._renewal_ttl(ttl))

    def _renewal_pause(self, ttl: timedelta) -> float:
        """Seconds until a keep-alive renews: a third of the TTL while ``HELD``, a ninth
        while ``UNCERTAIN`` (to be ``HELD`` again soon after Redis answers), and never past
        the moment the TTL surely passes, so that a loss is reported then."""
        pause = ttl.total_seconds() / (3 if self._doubt is None else 9)
        return max(min(pause, self._expired_by - time.monotonic()), 0.0)

    def _renewal_ttl(self, ttl: timedelta | None) -> timedelta:
        if ttl is not None:
            require_timedelta(ttl)
        ttl = ttl or self._ttl
        if ttl is None:
            ttl = timedelta(seconds=max(self._monotonic_deadline - time.monotonic(), 0))
        if ttl.total_seconds() <= 0:
            raise ValueError("keep_alive needs a positive ttl")
        return ttl
