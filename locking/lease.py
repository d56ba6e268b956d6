"""A granted lease, sync: release, extend, keep alive.

``FenceLock.acquire`` (locking/lock.py) grants a ``Lease``; the lease releases and extends
itself with the lock's registered scripts (compare-and-delete, compare-and-pexpire on its
own lock value), so it can never touch another holder's lease, and tells its ``Tenure``
(locking/tenure.py) what Redis answered: ``state``, ``check()``, ``lost`` and ``on_lost``
are the ``BaseLease``'s, shared with the ``AsyncLease``. None of this is the safety, which
is the fencing token checked by ``advance_fence``; it is what the holder can know.
``KeepAlive`` is the thread ``lease.keep_alive()`` renews it from (the async twin is
``AsyncKeepAlive``, beside ``AsyncLease``).
"""

import logging
import threading
import time
from datetime import timedelta
from typing import Protocol, Self

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisError

from locking import tracing
from locking.keys import lock_key, positive_ms
from locking.outcomes import LeaseState
from locking.scripts import Scripts, run_script
from locking.tenure import BaseLease, Granter

# The lease's own log (locking/tenure.py writes to it too).
logger = logging.getLogger(__name__)


class GrantingLock(Granter, Protocol):
    """What a lease uses of the ``FenceLock`` that granted it: its client and scripts, to
    release and extend; its database, for the fence. (A protocol, not the class: the lock
    imports this module, so this one does not import the lock.)"""

    @property
    def client(self) -> "redis.Redis | RedisCluster": ...

    @property
    def scripts(self) -> Scripts: ...


class Lease(BaseLease):
    """A granted lease. Use it as a context manager to release it on exit.

    ``state`` is ``HELD``, ``UNCERTAIN`` or ``LOST`` (locking/tenure.py). ``lost`` is a
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
        self._tenure.end()
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
        tenure = self._tenure
        if tenure.state.is_over:
            return False
        lock = self._lock
        started = time.monotonic()
        try:
            keys, args = (lock_key(self.resource),), (self._value, ttl_ms)
            extended = run_script(lock.client, lock.scripts.extend, keys, args) == 1
        except RedisError as exc:
            return tenure.renewed(False, ttl, started, error=exc)
        return tenure.renewed(extended, ttl, started)

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
        return KeepAlive(self, self._tenure.renewal_ttl(ttl))


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
        while not self._stop.wait(lease._tenure.renewal_pause(self.ttl)):
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
