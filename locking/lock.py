"""The fence lock: a Redis lease that hands out a fencing token with every grant.

A grant is one Lua script: ``SET lock:{r} … NX PX <ttl>`` and, only when that set the key,
``INCR fence:{r}``, so tokens follow grant order and no lease is without a token. The lease
is an efficiency measure; safety is the token ``advance_fence`` checks in the database.
``prepare_fences`` records a batch's first epochs at once. The modules around it: the
documentation's 'Inside the app' page.
"""

import contextlib
import logging
import time
from collections.abc import Iterable
from datetime import timedelta

import redis
from django.conf import settings
from redis.cluster import RedisCluster
from redis.exceptions import MovedError, NoScriptError, RedisError

from locking import tracing
from locking.conf import _ON_CHANGE, setting
from locking.connection import forget_slots, get_lock_redis, moved, node_client_for
from locking.epochs import begin_first_epochs, first_token, start_epoch
from locking.exceptions import LockHeld, LockUnavailable
from locking.keys import fence_key, holder_label, new_owner, ttl_ms_of, ttl_of, validate_resource
from locking.lease import AuditHook, Lease
from locking.outcomes import EpochCause
from locking.scripts import (
    ACQUIRE_LUA,
    SEEDING_CLAIM_MS,
    UNSEEDABLE,
    backoff_seconds,
    busy,
    epoch_cause,
    grant_keys,
    run_script,
    scripts_for,
    seed_poll_seconds,
    text,
    unavailable,
    unconfirmed,
)

logger = logging.getLogger(__name__)


def replica_rule(min_replicas: int | None, replica_timeout: timedelta | None) -> tuple[int, int]:
    """How many replicas must confirm a grant and how long ``WAIT`` waits for them (ms):
    what is given, else the settings (``LOCK_REDIS_MIN_REPLICAS``,
    ``LOCK_REDIS_WAIT_TIMEOUT_MS``), read only for what is not given, so that a lock with
    every argument given works without Django settings (benchmarks, scripts)."""
    if min_replicas is None:
        min_replicas = setting("LOCK_REDIS_MIN_REPLICAS")
    min_replicas = int(min_replicas)
    if replica_timeout is None and min_replicas:
        replica_timeout = timedelta(milliseconds=int(setting("LOCK_REDIS_WAIT_TIMEOUT_MS")))
    timeout_ms = max(int(replica_timeout.total_seconds() * 1000), 1) if replica_timeout else 0
    return min_replicas, timeout_ms


def log_reseed(resource: str, counter: int) -> None:
    """What ``reseed`` (and its async twin) logs: the counter raised to a new epoch."""
    logger.warning(
        "fence counter raised to a new epoch", extra={"resource": resource, "token": counter}
    )


class FenceLock:
    """Grants leases with fencing tokens on the configured Redis.

    ``FenceLock()`` uses the client that ``LOCK_REDIS_URL`` configures; pass ``client`` to
    use another (tests, benchmarks). Scripts are registered once per client and run with
    EVALSHA, so acquire, release and extend are one round trip each. Two cases add work to
    a grant: a counter Redis lost (or a resource's first grant) records a new epoch in the
    database first (locking/epochs.py), and with ``min_replicas`` the grant and a ``WAIT``
    for that many replicas go in one pipeline on one connection. Async code uses
    ``AsyncFenceLock`` (locking/asyncio/lock.py), the same on ``redis.asyncio``.
    """

    # Often built per operation by callers: slots make building, reading and dropping one
    # cheaper (one allocation, no __dict__), ~1 µs of a lock cycle on a loaded loopback.
    __slots__ = (
        "__weakref__",
        "client",
        "min_replicas",
        "replica_timeout_ms",
        "scripts",
        "using",
    )

    def __init__(
        self,
        client: "redis.Redis | RedisCluster | None" = None,
        *,
        using: str | None = None,
        min_replicas: int | None = None,
        replica_timeout: timedelta | None = None,
    ):
        # Settings and the client are read from caches (locking/conf.py, whose first read
        # notices new settings, then locking/connection.py), the scripts kept per client.
        self.using = using or setting("LOCK_DATABASE")
        self.client = client = client if client is not None else get_lock_redis()
        # The lock's scripts on its client; its leases release and extend with them too.
        self.scripts = scripts_for(client)
        self.min_replicas, self.replica_timeout_ms = replica_rule(min_replicas, replica_timeout)

    # -- grants --------------------------------------------------------------------------

    def acquire(
        self,
        resource: str,
        *,
        ttl: timedelta,
        wait: timedelta | None = None,
        holder: str = "",
        audit: "AuditHook | None" = None,
    ) -> "Lease":
        """Grant a lease on ``resource`` with a new fencing token, or raise ``LockHeld``.

        By default a busy resource is answered at once. With ``wait`` the call retries with
        jittered exponential backoff until a ``time.monotonic()`` deadline. ``audit`` is the
        lease's audit hook: ``lease.record_committed(outcome)`` calls ``audit(outcome,
        lease)`` (``run_fenced`` passes the one that writes its attempt's row in the work's
        transaction).
        """
        keys = grant_keys(resource)  # ValueError for a bad name, before Redis is touched
        ttl_ms = ttl_ms_of(ttl)
        label = holder_label(holder)
        # The span only where a tracer provider is set: a no-op one (entered, exited, given
        # the token) is a third of a µs, two per lock cycle, a few per cent of the budget
        # the lock cycle keeps against its bare scripts (at most 1.05 times the two scripts
        # called bare, in the benchmarks of the platform locking was built for).
        if tracing.no_provider():
            return self._acquire(resource, keys, ttl_ms, label, audit, wait)
        with tracing.operation_span("locking.acquire", resource) as span:
            lease = self._acquire(resource, keys, ttl_ms, label, audit, wait)
            span.set_attribute(tracing.FENCE_TOKEN, lease.token)
            return lease

    def _acquire(self, resource: str, keys, ttl_ms: int, label: str, audit, wait) -> "Lease":
        """Try to grant; while busy, retry until ``wait`` runs out (at once without it)."""
        deadline = time.monotonic() + wait.total_seconds() if wait else None
        attempt = 0
        while True:
            try:
                return self._try_acquire(resource, keys, ttl_ms, label, audit)
            except LockHeld:
                remaining = deadline - time.monotonic() if deadline is not None else 0
                if remaining <= 0:
                    raise
                time.sleep(backoff_seconds(attempt, remaining))
                attempt += 1

    def _try_acquire(self, resource: str, keys, ttl_ms: int, label: str, audit) -> "Lease":
        owner = new_owner()
        started = time.monotonic()
        reply = self._grant(resource, keys, owner, ttl_ms, label, floor="")
        while reply[0] == 3:
            time.sleep(seed_poll_seconds(reply))
            started = time.monotonic()
            reply = self._grant(resource, keys, owner, ttl_ms, label, floor="")
        if reply[0] == 2:
            # The counter is gone (or its epoch is used up): record a new epoch in the
            # database, then grant from its first token. Nothing was written before.
            floor = start_epoch(
                resource, above=int(reply[2] or 0), using=self.using, cause=epoch_cause(reply)
            )
            reply = self._grant(resource, keys, owner, ttl_ms, label, floor=str(floor))
            if reply[0] == 2:
                raise LockUnavailable(resource, UNSEEDABLE)
        return self._lease_or_busy(resource, reply, owner, ttl_ms, started, audit)

    def _lease_or_busy(
        self, resource: str, reply: list, owner: str, ttl_ms: int, started: float, audit
    ) -> "Lease":
        """Turn a grant reply (1: granted, 0: held) into a ``Lease`` or ``LockHeld``."""
        if reply[0] == 1:
            lease = Lease(
                resource=resource,
                token=int(reply[1]),
                owner=owner,
                value=reply[2],
                lock=self,
                ttl=ttl_of(ttl_ms),
                started=started,
                expires_ms=int(reply[3]) + ttl_ms,
                audit=audit,
            )
            if logger.isEnabledFor(logging.DEBUG):  # no record built on the hot path
                logger.debug("lease granted", extra={"resource": resource, "token": lease.token})
            return lease
        raise busy(resource, reply)

    def _grant(
        self, resource: str, keys: tuple, owner: str, ttl_ms: int, label: str, *, floor: str
    ) -> list:
        """Run the grant script; with ``min_replicas``, count a grant only once replicated.

        ``WAIT`` counts the writes of the connection it runs on, so it goes in one pipeline
        with the script (one round trip, one connection). On Redis Cluster that connection
        is one of the client of the node that owns the resource's slot (a cluster pipeline
        cannot carry ``WAIT``, which has no key): a plain pipeline there. A grant the
        replicas did not confirm in time is released and answered as ``LockUnavailable``: a
        failover to a replica that lacks it could hand its token out again, so it must
        never be used.
        """
        args = (owner, ttl_ms, label, floor, SEEDING_CLAIM_MS)
        try:
            if not self.min_replicas:
                return run_script(self.client, self.scripts.acquire, keys, args)
            reply, confirmed = self._grant_and_wait(keys, args)
        except RedisError as exc:
            raise unavailable(resource, exc) from exc
        if reply[0] == 1 and confirmed < self.min_replicas:
            # If the release fails the lease expires on its own; its token is never used.
            with contextlib.suppress(RedisError):
                self.scripts.release(keys=[keys[0]], args=[text(reply[2])])
            raise unconfirmed(
                resource,
                reply,
                confirmed,
                min_replicas=self.min_replicas,
                timeout_ms=self.replica_timeout_ms,
            )
        return reply

    def _grant_and_wait(self, keys: tuple, args: tuple) -> tuple[list, int]:
        # A MOVED answer means the script did not run (the slot has a new owner, e.g. after
        # a failover): ask that owner once. A NOSCRIPT one, that a restarted node forgot it.
        for _ in range(3):
            client = node_client_for(self.client, keys[0])
            pipe = client.pipeline(transaction=False)
            pipe.evalsha(self.scripts.acquire.sha, len(keys), *keys, *args)
            pipe.wait(self.min_replicas, self.replica_timeout_ms)
            try:
                reply, confirmed = pipe.execute(raise_on_error=False)
            except RedisError:
                forget_slots(self.client)  # the node may be gone: look again next time
                raise
            if isinstance(reply, MovedError):
                moved(self.client, reply)
                continue
            if isinstance(reply, NoScriptError):
                client.script_load(ACQUIRE_LUA)
                continue
            for result in (reply, confirmed):
                if isinstance(result, Exception):
                    raise result
            return reply, int(confirmed)
        raise LockUnavailable(keys[0], "the grant script could not be run on the slot's owner")

    # -- the counter ---------------------------------------------------------------------

    def current_token(self, resource: str) -> int:
        """Return the fence counter of ``resource`` (0 if Redis has none)."""
        validate_resource(resource)
        try:
            raw = self.client.get(fence_key(resource))
        except RedisError as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        return int(raw) if raw is not None else 0

    def reseed(self, resource: str, at_least: int) -> int:
        """Raise the fence counter of ``resource`` to at least ``at_least``; never lower it."""
        validate_resource(resource)
        try:
            counter = int(self.scripts.reseed(keys=[fence_key(resource)], args=[int(at_least)]))
        except RedisError as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        log_reseed(resource, counter)
        return counter


# The lock ``run_fenced`` and ``LeasedAttempt`` use when given none: a ``FenceLock()`` holds
# nothing but what the settings say (its client, scripts, database, replica rule), so one
# is built per process and settings holder, as its client is (locking/connection.py), not
# one per operation with four settings reads; built again after a setting changed.
_DEFAULT: dict = {}
_ON_CHANGE.append(_DEFAULT.clear)


def default_lock() -> FenceLock:
    """``FenceLock()``, built once for the current settings."""
    lock = _DEFAULT.get("lock")
    if lock is None or _DEFAULT["settings"] is not settings._wrapped:
        lock = _DEFAULT["lock"] = FenceLock()
        _DEFAULT["settings"] = settings._wrapped  # override_settings makes a new holder
    return lock


def prepare_fences(resources: Iterable[str], *, lock: FenceLock | None = None) -> int:
    """Record the first epoch of every resource in ``resources`` that never had one, in
    one database commit, and seed their counters in one pipeline; return how many.

    A batch's answer to a cost of its first grants: a resource's first grant finds no
    counter, so on its own it records epoch 0 (a commit) before granting. A job about to
    take thousands of new resources (a month of charges for every association) calls this
    once per chunk instead. The safety argument is the grant's own: the epoch is durable
    before any token of it exists, and seeding only creates a missing counter. Resources
    that have an epoch are untouched. ``lock`` gives the Redis and the database (default:
    the configured ones). Raises ``LockUnavailable`` if Redis is down (their grants would
    answer the same).
    """
    lock = lock or default_lock()
    client, using = lock.client, lock.using
    resources = list(resources)
    for resource in resources:
        validate_resource(resource)
    new = begin_first_epochs(resources, using=using)
    if not new:
        return 0
    for resource in new:  # the epoch each one's first grant would have started
        tracing.epochs_started(resource, EpochCause.FIRST_GRANT)
    try:
        # Epoch 0 starts at 0: "raise to at least its first token" is "create if missing".
        pipe = client.pipeline(transaction=False)
        for resource in new:
            pipe.set(fence_key(resource), first_token(0), nx=True)
        pipe.execute()
    except RedisError as exc:
        raise LockUnavailable(new[0], str(exc)) from exc
    return len(new)
