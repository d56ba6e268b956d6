"""The fence lock: a Redis lease that hands out a fencing token with every grant.

A grant is one Lua script (one round trip): ``SET lock:{r} <value> NX PX <ttl>`` and, only
when that set the key, ``INCR fence:{r}``. Doing both in one script means tokens are issued
in grant order (no other grant can slip between the SET and the INCR) and a crash cannot
leave a lease without a token. The lease itself is only an efficiency measure; safety comes
from the token checked by ``advance_fence`` in the database transaction.

The lock value is ``<owner id>|<acquired ms>|<holder label>``: a random owner id, so that
release and extend (compare-and-delete, compare-and-pexpire) can never touch another
holder's lease, plus what an operator needs to see who holds it and since when.

Every operation has an async twin (``aacquire``, ``Lease.arelease``…) that runs the same
script constants on a ``redis.asyncio`` client. ``break_lease`` is the operators' one way
to delete a lease that is not theirs; the fence makes it as safe as an expiry.
"""

import asyncio
import contextlib
import functools
import logging
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from asgiref.sync import sync_to_async
from redis.exceptions import NoScriptError, RedisClusterException, RedisError

from locking import tracing
from locking.audit import record_fence_event
from locking.conf import setting
from locking.connection import get_async_lock_redis, get_lock_redis
from locking.epochs import MAX_EPOCH, begin_epoch, begin_first_epochs, epoch_of, first_token
from locking.exceptions import LeaseLost, LockHeld, LockUnavailable
from locking.keys import (
    fence_key,
    lock_key,
    resource_from_lock_key,
    seed_key,
    validate_resource,
)
from locking.outcomes import Outcome
from locking.scripts import ACQUIRE_LUA, Scripts, scripts_for

logger = logging.getLogger(__name__)

# The audit's operation name of a broken lease.
BREAK_OPERATION = "break-lease"

# Recording a new epoch is one database round trip; a claim outlives it comfortably. A
# caller that finds another's claim polls at most this often.
_SEEDING_CLAIM_MS = 2000
_SEEDING_POLL_MS = 5

# Backoff for acquire(wait=...): full jitter between 0 and an exponentially growing cap.
_BACKOFF_BASE_SECONDS = 0.01
_BACKOFF_CAP_SECONDS = 0.25


def _from_ms(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def holder_label(holder: str = "") -> str:
    """Describe this process as a lock holder: ``<who> on <host> pid <pid>``."""
    where = _process_label(os.getpid())
    label = f"{holder} on {where}" if holder else where
    # The label is metadata inside the lock value; keep it short and on one line.
    return " ".join(label.split())[:200]


@functools.cache
def _process_label(pid: int) -> str:
    """``<host> pid <pid>``: formatted once per process (a forked child has its own pid)."""
    return f"{socket.gethostname()} pid {pid}"


@dataclass(frozen=True)
class HolderInfo:
    """What an operator sees of a held lease."""

    resource: str
    owner: str
    label: str
    acquired_at: datetime | None
    ttl_left: timedelta
    token: int | None

    @property
    def expires_at(self) -> datetime:
        return datetime.now(tz=UTC) + self.ttl_left


def parse_lock_value(value: str) -> tuple[str, datetime | None, str]:
    """Split a stored lock value into (owner id, acquired at, holder label)."""
    owner, _, rest = value.partition("|")
    acquired, _, label = rest.partition("|")
    acquired_at = _from_ms(int(acquired)) if acquired.isdigit() else None
    return owner, acquired_at, label


def _text(raw) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _positive_ms(ttl: timedelta) -> int:
    ttl_ms = int(ttl.total_seconds() * 1000)
    if ttl_ms <= 0:
        raise ValueError("ttl must be positive")
    return ttl_ms


def _backoff_seconds(attempt: int, remaining: float) -> float:
    """Full jitter between 0 and an exponentially growing cap, never past the deadline."""
    cap = min(_BACKOFF_CAP_SECONDS, _BACKOFF_BASE_SECONDS * 2**attempt)
    return min(remaining, random.uniform(0, cap))


def _seed_poll_seconds(reply: list) -> float:
    # Another caller is recording the new epoch: a few milliseconds, normally. If it died,
    # its claim expires and the next attempt here records the epoch instead.
    return min(max(int(reply[1]), 1), _SEEDING_POLL_MS) / 1000


# What the grant script's reply (and the replicas' confirmation) leaves unavailable.
_UNSEEDABLE = "the fence counter could not be reseeded"


class FenceLock:
    """Grants leases with fencing tokens on the configured Redis.

    ``FenceLock()`` uses the client that ``LOCK_REDIS_URL`` configures; pass ``client`` to
    use another (tests, benchmarks). Scripts are registered once per client and run with
    EVALSHA, so acquire, release and extend are one round trip each. Two cases add work to
    a grant: a counter Redis lost (or a resource's first grant) records a new epoch in the
    database first (locking/epochs.py), and with ``min_replicas`` the grant and a ``WAIT``
    for that many replicas go in one pipeline on one connection.

    The async methods (``aacquire``, ``Lease.arelease``/``aextend``…) run the same scripts
    on a ``redis.asyncio`` client: ``async_client`` if given, else one built from the same
    settings for the running event loop (locking/connection.py). A ``redis.asyncio``
    connection belongs to the loop that opened it, so one ``FenceLock`` serves any loop.
    Both clients must reach the same Redis: given ``client``, the async methods need
    ``async_client`` too (they refuse to fall back on the settings' Redis).
    """

    def __init__(
        self,
        client=None,
        *,
        async_client=None,
        using: str | None = None,
        min_replicas: int | None = None,
        replica_timeout: timedelta | None = None,
    ):
        self.client = client if client is not None else get_lock_redis()
        self._acquire, self._release, self._extend, self._reseed, self._break = scripts_for(
            self.client
        )
        self._async_client = async_client
        self._client_given = client is not None
        # Settings are read only for what is not passed: a FenceLock with every argument
        # given works without Django settings (benchmarks, scripts).
        self.using = using or setting("LOCK_DATABASE")
        self.min_replicas = int(
            setting("LOCK_REDIS_MIN_REPLICAS") if min_replicas is None else min_replicas
        )
        if replica_timeout is None and self.min_replicas:
            replica_timeout = timedelta(milliseconds=int(setting("LOCK_REDIS_WAIT_TIMEOUT_MS")))
        self.replica_timeout_ms = (
            max(int(replica_timeout.total_seconds() * 1000), 1) if replica_timeout else 0
        )

    @property
    def async_client(self):
        """The ``redis.asyncio`` client: the one given, else the running loop's own."""
        if self._async_client is not None:
            return self._async_client
        if self._client_given:
            raise TypeError(
                "FenceLock(client=...) uses its own Redis: pass async_client= too for the "
                "async methods, or they would lock on another server."
            )
        return get_async_lock_redis()

    def _async_scripts(self) -> Scripts:
        return scripts_for(self.async_client)

    # -- grants --------------------------------------------------------------------------

    def acquire(
        self,
        resource: str,
        *,
        ttl: timedelta,
        wait: timedelta | None = None,
        holder: str = "",
    ) -> "Lease":
        """Grant a lease on ``resource`` with a new fencing token, or raise ``LockHeld``.

        By default a busy resource is answered at once. With ``wait`` the call retries with
        jittered exponential backoff until a ``time.monotonic()`` deadline.
        """
        validate_resource(resource)
        ttl_ms = _positive_ms(ttl)
        label = holder_label(holder)
        deadline = time.monotonic() + wait.total_seconds() if wait else None
        with tracing.operation_span("locking.acquire", resource) as span:
            attempt = 0
            while True:
                try:
                    lease = self._try_acquire(resource, ttl_ms, label)
                except LockHeld:
                    remaining = deadline - time.monotonic() if deadline is not None else 0
                    if remaining <= 0:
                        raise
                    time.sleep(_backoff_seconds(attempt, remaining))
                    attempt += 1
                else:
                    span.set_attribute(tracing.FENCE_TOKEN, lease.token)
                    return lease

    async def aacquire(
        self,
        resource: str,
        *,
        ttl: timedelta,
        wait: timedelta | None = None,
        holder: str = "",
    ) -> "Lease":
        """``acquire()`` for async code: the same scripts and answers, on ``redis.asyncio``.

        Recording a new epoch (a resource's first grant, a counter Redis lost) is a
        database write: it runs in ``sync_to_async(thread_sensitive=True)``.
        """
        validate_resource(resource)
        ttl_ms = _positive_ms(ttl)
        label = holder_label(holder)
        deadline = time.monotonic() + wait.total_seconds() if wait else None
        with tracing.operation_span("locking.acquire", resource) as span:
            attempt = 0
            while True:
                try:
                    lease = await self._atry_acquire(resource, ttl_ms, label)
                except LockHeld:
                    remaining = deadline - time.monotonic() if deadline is not None else 0
                    if remaining <= 0:
                        raise
                    await asyncio.sleep(_backoff_seconds(attempt, remaining))
                    attempt += 1
                else:
                    span.set_attribute(tracing.FENCE_TOKEN, lease.token)
                    return lease

    def _try_acquire(self, resource: str, ttl_ms: int, label: str) -> "Lease":
        owner = secrets.token_hex(16)
        started = time.monotonic()
        reply = self._grant(resource, owner, ttl_ms, label, floor="")
        while reply[0] == 3:
            time.sleep(_seed_poll_seconds(reply))
            started = time.monotonic()
            reply = self._grant(resource, owner, ttl_ms, label, floor="")
        if reply[0] == 2:
            # The counter is gone (or its epoch is used up): record a new epoch in the
            # database, then grant from its first token. Nothing was written before.
            floor = self.start_epoch(resource, above=int(reply[2] or 0))
            reply = self._grant(resource, owner, ttl_ms, label, floor=str(floor))
            if reply[0] == 2:
                raise LockUnavailable(resource, _UNSEEDABLE)
        return self._lease_or_busy(resource, reply, owner, ttl_ms, started)

    async def _atry_acquire(self, resource: str, ttl_ms: int, label: str) -> "Lease":
        # The same steps as _try_acquire, awaiting Redis and the database.
        owner = secrets.token_hex(16)
        started = time.monotonic()
        reply = await self._agrant(resource, owner, ttl_ms, label, floor="")
        while reply[0] == 3:
            await asyncio.sleep(_seed_poll_seconds(reply))
            started = time.monotonic()
            reply = await self._agrant(resource, owner, ttl_ms, label, floor="")
        if reply[0] == 2:
            floor = await self.astart_epoch(resource, above=int(reply[2] or 0))
            reply = await self._agrant(resource, owner, ttl_ms, label, floor=str(floor))
            if reply[0] == 2:
                raise LockUnavailable(resource, _UNSEEDABLE)
        return self._lease_or_busy(resource, reply, owner, ttl_ms, started)

    def _lease_or_busy(
        self, resource: str, reply: list, owner: str, ttl_ms: int, started: float
    ) -> "Lease":
        """Turn a grant reply (1: granted, 0: held) into a ``Lease`` or ``LockHeld``."""
        if reply[0] == 1:
            token, value, acquired_ms = int(reply[1]), _text(reply[2]), int(reply[3])
            lease = Lease(
                resource=resource,
                token=token,
                owner=owner,
                expires_at=_from_ms(acquired_ms + ttl_ms),
                _lock=self,
                _value=value,
                _ttl=timedelta(milliseconds=ttl_ms),
                # The local deadline starts before the request was sent: never later
                # than Redis's own expiry.
                _monotonic_deadline=started + ttl_ms / 1000,
            )
            logger.debug("lease granted", extra={"resource": resource, "token": token})
            return lease
        holder_owner, acquired_at, holder = parse_lock_value(_text(reply[1]))
        remaining_ms = max(int(reply[2]), 0)
        retry_after = timedelta(milliseconds=remaining_ms)
        raise LockHeld(
            resource,
            holder=holder or holder_owner,
            retry_after=retry_after,
            acquired_at=acquired_at,
            expires_at=datetime.now(tz=UTC) + retry_after,
            token=int(reply[3]) if reply[3] is not None else None,
        )

    def _grant(self, resource: str, owner: str, ttl_ms: int, label: str, *, floor: str) -> list:
        """Run the grant script; with ``min_replicas``, count a grant only once replicated.

        ``WAIT`` counts the writes of the connection it runs on, so it goes in one pipeline
        with the script (one round trip, one connection). A grant the replicas did not
        confirm in time is released and answered as ``LockUnavailable``: a failover to a
        replica that lacks it could hand its token out again, so it must never be used.
        """
        keys, args = self._grant_keys_args(resource, owner, ttl_ms, label, floor)
        try:
            if not self.min_replicas:
                return self._acquire(keys=keys, args=args)
            reply, confirmed = self._grant_and_wait(keys, args)
        except RedisError as exc:
            raise self._unavailable(resource, exc) from exc
        if reply[0] == 1 and confirmed < self.min_replicas:
            # If the release fails the lease expires on its own; its token is never used.
            with contextlib.suppress(RedisError):
                self._release(keys=[keys[0]], args=[_text(reply[2])])
            raise self._unconfirmed(resource, reply, confirmed)
        return reply

    async def _agrant(
        self, resource: str, owner: str, ttl_ms: int, label: str, *, floor: str
    ) -> list:
        """``_grant`` on the async client: the same script, the same replica rule."""
        keys, args = self._grant_keys_args(resource, owner, ttl_ms, label, floor)
        scripts = self._async_scripts()
        try:
            if not self.min_replicas:
                return await scripts.acquire(keys=keys, args=args)
            reply, confirmed = await self._agrant_and_wait(keys, args)
        except (RedisError, RedisClusterException) as exc:
            raise self._unavailable(resource, exc) from exc
        if reply[0] == 1 and confirmed < self.min_replicas:
            with contextlib.suppress(RedisError, RedisClusterException):
                await scripts.release(keys=[keys[0]], args=[_text(reply[2])])
            raise self._unconfirmed(resource, reply, confirmed)
        return reply

    @staticmethod
    def _grant_keys_args(resource, owner, ttl_ms, label, floor) -> tuple[list, list]:
        keys = [lock_key(resource), fence_key(resource), seed_key(resource)]
        return keys, [owner, ttl_ms, label, floor, _SEEDING_CLAIM_MS]

    @staticmethod
    def _unavailable(resource: str, exc: Exception) -> LockUnavailable:
        logger.warning("lock service unavailable", extra={"resource": resource, "error": str(exc)})
        return LockUnavailable(resource, str(exc) or exc.__class__.__name__)

    def _unconfirmed(self, resource: str, reply: list, confirmed: int) -> LockUnavailable:
        logger.warning(
            "grant not confirmed by replicas; released",
            extra={"resource": resource, "token": int(reply[1]), "replicas": confirmed},
        )
        return LockUnavailable(
            resource,
            f"{confirmed} of {self.min_replicas} replicas confirmed the grant "
            f"within {self.replica_timeout_ms} ms",
        )

    def _grant_and_wait(self, keys: list, args: list) -> tuple[list, int]:
        for _ in range(2):
            pipe = self.client.pipeline(transaction=False)
            pipe.evalsha(self._acquire.sha, len(keys), *keys, *args)
            pipe.wait(self.min_replicas, self.replica_timeout_ms)
            reply, confirmed = pipe.execute(raise_on_error=False)
            if isinstance(reply, NoScriptError):
                self.client.script_load(ACQUIRE_LUA)  # a restarted Redis forgot it
                continue
            for result in (reply, confirmed):
                if isinstance(result, Exception):
                    raise result
            return reply, int(confirmed)
        raise LockUnavailable(keys[0], "the grant script could not be loaded")

    async def _agrant_and_wait(self, keys: list, args: list) -> tuple[list, int]:
        client = self.async_client
        for _ in range(2):
            pipe = client.pipeline(transaction=False)
            pipe.evalsha(self._acquire.sha, len(keys), *keys, *args)
            pipe.wait(self.min_replicas, self.replica_timeout_ms)
            reply, confirmed = await pipe.execute(raise_on_error=False)
            if isinstance(reply, NoScriptError):
                await client.script_load(ACQUIRE_LUA)  # a restarted Redis forgot it
                continue
            for result in (reply, confirmed):
                if isinstance(result, Exception):
                    raise result
            return reply, int(confirmed)
        raise LockUnavailable(keys[0], "the grant script could not be loaded")

    # -- the counter ---------------------------------------------------------------------

    def current_token(self, resource: str) -> int:
        """Return the fence counter of ``resource`` (0 if Redis has none)."""
        validate_resource(resource)
        try:
            raw = self.client.get(fence_key(resource))
        except RedisError as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        return int(raw) if raw is not None else 0

    async def acurrent_token(self, resource: str) -> int:
        """``current_token()`` on the async client."""
        validate_resource(resource)
        try:
            raw = await self.async_client.get(fence_key(resource))
        except (RedisError, RedisClusterException) as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        return int(raw) if raw is not None else 0

    def start_epoch(self, resource: str, *, above: int = 0) -> int:
        """Record a new epoch of ``resource`` in the database; return its first token.

        The epoch is the one after the recorded epoch (a resource with none starts at 0),
        and, when ``above`` is a token known to be granted, above that token's epoch.
        """
        floor_epoch = epoch_of(above) + 1 if above else 0
        epoch = begin_epoch(resource, floor=floor_epoch, using=self.using)
        if epoch > MAX_EPOCH:
            raise LockUnavailable(resource, f"fence epochs exhausted (epoch {epoch})")
        return first_token(epoch)

    async def astart_epoch(self, resource: str, *, above: int = 0) -> int:
        """``start_epoch()`` from async code: the same committed write, in the thread
        Django's async ORM uses (``sync_to_async(thread_sensitive=True)``)."""
        return await sync_to_async(self.start_epoch, thread_sensitive=True)(resource, above=above)

    def reseed(self, resource: str, at_least: int) -> int:
        """Raise the fence counter of ``resource`` to at least ``at_least``; never lower it."""
        validate_resource(resource)
        try:
            counter = int(self._reseed(keys=[fence_key(resource)], args=[int(at_least)]))
        except RedisError as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        self._reseeded(resource, counter)
        return counter

    async def areseed(self, resource: str, at_least: int) -> int:
        """``reseed()`` on the async client."""
        validate_resource(resource)
        try:
            script = self._async_scripts().reseed
            counter = int(await script(keys=[fence_key(resource)], args=[int(at_least)]))
        except (RedisError, RedisClusterException) as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        self._reseeded(resource, counter)
        return counter

    def prepare(self, resources) -> int:
        """Record the first epoch of every resource in ``resources`` that never had one, in
        one database commit, and seed their counters in one pipeline; return how many.

        A batch's answer to a cost of its first grants: a resource's first grant finds no
        counter, so on its own it records epoch 0 (a commit) before granting. A job about
        to take thousands of new resources (``generate_monthly_charges --all-orgs`` bills a
        new month of every association) calls this once per chunk instead. The safety
        argument is the grant's own: the epoch is durable before any token of it exists,
        and seeding only creates a missing counter. Resources that have an epoch are untouched.
        Raises ``LockUnavailable`` if Redis is down (their grants would answer the same).
        """
        resources = list(resources)
        for resource in resources:
            validate_resource(resource)
        new = begin_first_epochs(resources, using=self.using)
        if not new:
            return 0
        try:
            # Epoch 0 starts at 0: "raise to at least its first token" is "create if missing".
            pipe = self.client.pipeline(transaction=False)
            for resource in new:
                pipe.set(fence_key(resource), first_token(0), nx=True)
            pipe.execute()
        except RedisError as exc:
            raise LockUnavailable(new[0], str(exc)) from exc
        return len(new)

    @staticmethod
    def _reseeded(resource: str, counter: int) -> None:
        logger.warning(
            "fence counter raised to a new epoch",
            extra={"resource": resource, "token": counter},
        )

    # -- operators' view and hand --------------------------------------------------------

    def holder(self, resource: str) -> HolderInfo | None:
        """Return who holds ``resource`` now, or None."""
        validate_resource(resource)
        try:
            return self._holder_info(resource)
        except RedisError as exc:
            raise LockUnavailable(resource, str(exc)) from exc

    def _holder_info(self, resource: str) -> HolderInfo | None:
        pipe = self.client.pipeline(transaction=False)
        pipe.get(lock_key(resource))
        pipe.pttl(lock_key(resource))
        pipe.get(fence_key(resource))
        value, pttl, counter = pipe.execute()
        if value is None:
            return None  # released or expired
        return _holder_info(resource, value, pttl, counter)

    def holders(self, *, prefix: str = "", limit: int = 200) -> list[HolderInfo]:
        """Return up to ``limit`` current holders, found with SCAN (never KEYS)."""
        # Escape the glob characters SCAN's MATCH knows, so a prefix matches literally.
        literal = "".join("\\" + ch if ch in "*?[]\\" else ch for ch in prefix)
        pattern = "lock:{" + literal + "*}"
        found = []
        try:
            for key in self.client.scan_iter(match=pattern, count=500):
                found.append(_text(key))
                if len(found) >= limit:
                    break
            infos = []
            for key in found:
                info = self._holder_info(resource_from_lock_key(key))
                if info is not None:  # None: released or expired since SCAN saw it
                    infos.append(info)
        except RedisError as exc:
            raise LockUnavailable(prefix or "*", str(exc)) from exc
        return sorted(infos, key=lambda info: info.resource)

    def break_lease(
        self,
        resource: str,
        *,
        by: str,
        reason: str,
        scope: str = "",
        ip: str | None = None,
    ) -> HolderInfo | None:
        """Delete the lease on ``resource``, whoever holds it; return who held it, or None.

        For a holder that is stuck (hung, partitioned, holding a long TTL): the next
        grant gets a larger token, so once that holder commits, the fence refuses the
        broken holder's late write — breaking a lease is as safe as letting it expire.
        ``by`` (who) and ``reason`` are required, and recorded in the audit as outcome
        ``broken`` with the broken holder's token; nothing is recorded when nothing was
        held. The holder learns of it at its next extend (``lease.lost``, ``on_lost``).
        """
        validate_resource(resource)
        if not by.strip():
            raise ValueError("break_lease() needs who breaks the lease (by=…)")
        if not reason.strip():
            raise ValueError("break_lease() needs a reason")
        with tracing.operation_span("locking.break_lease", resource) as span:
            try:
                reply = self._break(keys=[lock_key(resource), fence_key(resource)])
            except RedisError as exc:
                raise LockUnavailable(resource, str(exc)) from exc
            if not reply:
                logger.info("nothing to break: no lease held", extra={"resource": resource})
                return None
            broken = _holder_info(resource, *reply)
            tracing.set_outcome(span, Outcome.BROKEN)
            if broken.token is not None:
                span.set_attribute(tracing.FENCE_TOKEN, broken.token)
        since = f" since {broken.acquired_at:%Y-%m-%d %H:%M:%S} UTC" if broken.acquired_at else ""
        record_fence_event(
            resource=resource,
            outcome=Outcome.BROKEN,
            token=broken.token,
            actor=by,
            detail=f"lease of {broken.label or broken.owner}{since} broken: {reason.strip()}",
            scope=scope,
            operation=BREAK_OPERATION,
            ip=ip,
            using=self.using,
        )
        return broken


def _holder_info(resource: str, value, pttl, counter) -> HolderInfo:
    owner, acquired_at, label = parse_lock_value(_text(value))
    return HolderInfo(
        resource=resource,
        owner=owner,
        label=label,
        acquired_at=acquired_at,
        ttl_left=timedelta(milliseconds=max(int(pttl), 0)),
        token=int(counter) if counter is not None else None,
    )


class LostSignal(threading.Event):
    """Set once a lease is no longer its holder's: ``lease.lost.is_set()``, ``.wait()``.

    A ``threading.Event`` that is set at most once and never cleared, with the ``reason``
    it was set. ``bool(lease.lost)`` is ``is_set()``, as the boolean ``lost`` it replaces
    was, so ``if lease.lost:`` keeps its meaning. Callbacks registered with
    ``Lease.on_lost`` run once when the lease is lost; never when its holder released it
    first (that is the end of the work, not a loss).
    """

    def __init__(self):
        super().__init__()
        self.reason = ""
        self._guard = threading.Lock()
        self._callbacks: list[Callable[[Lease], object]] = []
        self._lease: Lease | None = None
        self._fired = False  # the callbacks ran
        self._quiet = False  # released by its holder: there is no loss to report

    def __bool__(self) -> bool:
        return self.is_set()

    def __repr__(self) -> str:
        return f"<LostSignal {'set: ' + self.reason if self.is_set() else 'not set'}>"

    def set(self) -> None:
        """Mark the lease lost by hand (e.g. the work learned it elsewhere)."""
        self._mark("marked lost by its holder", notify=True)

    def clear(self) -> None:
        raise RuntimeError("a lost lease stays lost: acquire a new one")

    def _mark(self, reason: str, *, notify: bool) -> None:
        """Set the signal once; with ``notify``, run the callbacks, each once."""
        with self._guard:
            if not super().is_set():
                self.reason = reason
                super().set()
            if not notify:
                self._quiet = True
                return
            if self._quiet or self._fired:
                return
            self._fired = True
            callbacks = list(self._callbacks)
        for callback in callbacks:
            _run_callback(callback, self._lease)

    def _add_callback(self, callback: Callable[["Lease"], object]) -> None:
        with self._guard:
            self._callbacks.append(callback)
            run_now = self._fired
        if run_now:
            _run_callback(callback, self._lease)


def _run_callback(callback: Callable[["Lease"], object], lease: "Lease") -> None:
    try:
        callback(lease)
    except Exception:  # a callback's bug must not stop the keep-alive that called it
        logger.exception(
            "on_lost callback failed", extra={"resource": lease.resource, "token": lease.token}
        )


@dataclass
class Lease:
    """A granted lease. Use it as a context manager to release it on exit.

    ``lost`` is a ``LostSignal`` (a ``threading.Event``): set the moment this process
    learns the lease is no longer its own (an extend refused or failed, its TTL passed at
    ``check()``) and when it is released. ``check()`` raises ``LeaseLost`` then: call it
    before an expensive step. ``on_lost(callback)`` is told once of a loss (not of a
    release). None of this is the safety; the fence is.
    """

    resource: str
    token: int
    owner: str
    expires_at: datetime
    _lock: FenceLock = field(repr=False)
    _value: str = field(repr=False)
    _monotonic_deadline: float = field(repr=False)
    lost: LostSignal = field(default_factory=LostSignal)
    # The TTL last granted or extended: what keep_alive() renews to by default.
    _ttl: timedelta | None = field(default=None, repr=False)
    # Set by run_fenced: writes the attempt's committed audit row in the caller's transaction.
    _record_committed: Callable[..., None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.lost._lease = self

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.arelease()

    @property
    def probably_valid(self) -> bool:
        """Whether the lease can still be ours by this process's monotonic clock.

        A hint for skipping doomed work, never a safety check: the fence is that.
        """
        return not self.lost.is_set() and time.monotonic() < self._monotonic_deadline

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
        if self._record_committed is not None:
            self._record_committed(outcome, self)

    def check(self) -> None:
        """Raise ``LeaseLost`` if the lease is lost, or past its TTL by this process's clock.

        Call it before a step that costs something (an external call, a long
        computation): a lost lease's write would be refused by the fence anyway.
        """
        if not self.lost.is_set() and time.monotonic() >= self._monotonic_deadline:
            self._mark_lost("its TTL passed by this process's clock")
        if self.lost.is_set():
            raise LeaseLost(self.resource, self.token, self.lost.reason)

    def _mark_lost(self, reason: str, *, notify: bool = True) -> None:
        if notify and not self.lost.is_set():
            logger.warning(
                "lease lost: %s",
                reason,
                extra={"resource": self.resource, "token": self.token, "outcome": Outcome.LOST},
            )
        self.lost._mark(reason, notify=notify)

    # -- release and extend --------------------------------------------------------------

    def release(self) -> bool:
        """Delete the lock if it is still ours. False if it expired or was taken over.

        If Redis cannot be reached the lease is left to expire on its own (False). Sets
        ``lost`` (the lease is no longer usable) without calling ``on_lost`` callbacks.
        """
        with tracing.operation_span("locking.release", self.resource, token=self.token) as span:
            try:
                released = bool(
                    self._lock._release(keys=[lock_key(self.resource)], args=[self._value])
                )
            except RedisError as exc:
                self._release_failed(exc)
                released = False
            span.set_attribute(tracing.RELEASED, released)
        self._mark_lost("released", notify=False)
        return released

    async def arelease(self) -> bool:
        """``release()`` for async code, on the lock's ``redis.asyncio`` client."""
        with tracing.operation_span("locking.release", self.resource, token=self.token) as span:
            try:
                script = self._lock._async_scripts().release
                released = bool(await script(keys=[lock_key(self.resource)], args=[self._value]))
            except (RedisError, RedisClusterException) as exc:
                self._release_failed(exc)
                released = False
            span.set_attribute(tracing.RELEASED, released)
        self._mark_lost("released", notify=False)
        return released

    def _release_failed(self, exc: Exception) -> None:
        logger.warning(
            "could not release lease; it will expire",
            extra={"resource": self.resource, "token": self.token, "error": str(exc)},
        )

    def extend(self, ttl: timedelta) -> bool:
        """Reset the lease's expiry to ``ttl`` from now if it is still ours.

        False (and ``lost`` set, ``on_lost`` called) if it is not, or Redis did not answer.
        """
        ttl_ms = _positive_ms(ttl)
        started = time.monotonic()
        try:
            extended = bool(
                self._lock._extend(keys=[lock_key(self.resource)], args=[self._value, ttl_ms])
            )
        except RedisError as exc:
            return self._extended(False, ttl, started, error=exc)
        return self._extended(extended, ttl, started)

    async def aextend(self, ttl: timedelta) -> bool:
        """``extend()`` for async code, on the lock's ``redis.asyncio`` client."""
        ttl_ms = _positive_ms(ttl)
        started = time.monotonic()
        try:
            script = self._lock._async_scripts().extend
            extended = bool(
                await script(keys=[lock_key(self.resource)], args=[self._value, ttl_ms])
            )
        except (RedisError, RedisClusterException) as exc:
            return self._extended(False, ttl, started, error=exc)
        return self._extended(extended, ttl, started)

    def _extended(
        self, extended: bool, ttl: timedelta, started: float, *, error: Exception | None = None
    ) -> bool:
        if extended:
            self._ttl = ttl
            self._monotonic_deadline = started + ttl.total_seconds()
            self.expires_at = datetime.now(tz=UTC) + ttl
        elif error is not None:
            logger.warning(
                "could not extend lease",
                extra={"resource": self.resource, "token": self.token, "error": str(error)},
            )
            self._mark_lost(f"extend failed: {error}")
        else:
            self._mark_lost("extend refused: the lease expired or has another holder")
        return extended

    def keep_alive(self, ttl: timedelta | None = None) -> "KeepAlive":
        """Extend the lease every ttl/3 in a background thread while the block runs.

        Use it for work whose length you cannot bound (a slow but healthy call); it keeps
        other workers from starting duplicate work. It does not make the holder safe: a
        paused process stops renewing, loses the lease, and only the fence check then
        keeps its late write out.

        ``ttl`` defaults to the TTL the lease was granted (or last extended) with. Not the
        time left: that would shrink with every late call, and ``expires_at`` comes from
        Redis's clock, which this host's clock may not agree with.
        """
        return KeepAlive(self, self._renewal_ttl(ttl))

    def akeep_alive(
        self, ttl: timedelta | None = None, *, cancel: bool = False
    ) -> "AsyncKeepAlive":
        """``keep_alive()`` for async code: an asyncio task extends the lease every ttl/3.

        ``async with lease.akeep_alive(cancel=True):`` also cancels the task running the
        block the moment an extend fails, and the block then ends with ``LeaseLost`` (as
        ``asyncio.timeout()`` ends one with ``TimeoutError``). Cancellation stops the
        awaiting, not work already handed to a thread: a fenced commit running in
        ``sync_to_async`` finishes or is refused by the fence, as without cancellation.
        """
        return AsyncKeepAlive(self, self._renewal_ttl(ttl), cancel=cancel)

    def _renewal_ttl(self, ttl: timedelta | None) -> timedelta:
        ttl = ttl or self._ttl
        if ttl is None:
            ttl = timedelta(seconds=max(self._monotonic_deadline - time.monotonic(), 0))
        if ttl.total_seconds() <= 0:
            raise ValueError("keep_alive needs a positive ttl")
        return ttl


class KeepAlive:
    """Background renewal of a lease; stops and marks the lease lost when an extend fails."""

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

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        interval = self.ttl.total_seconds() / 3
        while not self._stop.wait(interval):
            if not self.lease.extend(self.ttl):
                logger.warning(
                    "lease lost during keep-alive",
                    extra={"resource": self.lease.resource, "token": self.lease.token},
                )
                return


class AsyncKeepAlive:
    """Renewal of a lease by an asyncio task; with ``cancel``, a loss cancels the block.

    The renewal is stopped with an event and awaited, never cancelled: a cancellation that
    lands inside a ``redis.asyncio`` command can be swallowed by the client (redis-py 8.1
    turns some into a retry of the loop or a ``ConnectionError``), which would leave the
    renewal running after the block.
    """

    def __init__(self, lease: Lease, ttl: timedelta, *, cancel: bool):
        self.lease = lease
        self.ttl = ttl
        self.cancel = cancel
        self._task: asyncio.Task | None = None  # the task running the block
        self._cancelling = 0
        self._renewal: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._cancelled_by_us = False

    async def __aenter__(self) -> Lease:
        self._task = asyncio.current_task()
        self._cancelling = self._task.cancelling() if self._task else 0
        self._renewal = asyncio.create_task(self._run(), name=f"keep-alive {self.lease.resource}")
        return self.lease

    async def __aexit__(self, exc_type, exc, traceback) -> None:
        self._stop.set()
        await self._renewal  # at most one extend in flight, bounded by the socket timeout
        if not self._cancelled_by_us:
            return
        # Our cancellation, and no one else's: answer it as the loss it stands for. (A
        # block that finished anyway, its cancellation swallowed on the way, stands.)
        if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            lease = self.lease
            raise LeaseLost(lease.resource, lease.token, lease.lost.reason) from exc

    async def _run(self) -> None:
        interval = self.ttl.total_seconds() / 3
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), interval)
                return  # the block ended
            except TimeoutError:
                pass
            if await self.lease.aextend(self.ttl):
                continue
            logger.warning(
                "lease lost during keep-alive",
                extra={"resource": self.lease.resource, "token": self.lease.token},
            )
            # While the block is exiting there is nothing left to stop.
            if self.cancel and not self._stop.is_set() and self._task is not None:
                self._cancelled_by_us = True
                self._task.cancel(f"lease on {self.lease.resource} lost")
            return
