"""The fence lock: a Redis lease that hands out a fencing token with every grant.

A grant is one Lua script (one round trip): ``SET lock:{r} <value> NX PX <ttl>`` and, only
when that set the key, ``INCR fence:{r}``. Doing both in one script means tokens are issued
in grant order (no other grant can slip between the SET and the INCR) and a crash cannot
leave a lease without a token. The lease itself is only an efficiency measure; safety comes
from the token checked by ``advance_fence`` in the database transaction.

The lock value is ``<owner id>|<acquired ms>|<holder label>``: a random owner id, so that
release and extend (compare-and-delete, compare-and-pexpire) can never touch another
holder's lease, plus what an operator needs to see who holds it and since when.
"""

import contextlib
import logging
import os
import random
import secrets
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from redis.exceptions import NoScriptError, RedisError

from locking.conf import setting
from locking.connection import get_lock_redis
from locking.epochs import MAX_EPOCH, begin_epoch, epoch_of, first_token
from locking.exceptions import LockHeld, LockUnavailable
from locking.keys import (
    fence_key,
    lock_key,
    resource_from_lock_key,
    seed_key,
    validate_resource,
)

logger = logging.getLogger(__name__)

# KEYS[1] = lock:{resource}, KEYS[2] = fence:{resource}, KEYS[3] = seed:{resource}
# ARGV[1] = owner id (random), ARGV[2] = ttl in ms, ARGV[3] = holder label,
# ARGV[4] = '' normally; after this owner recorded a new epoch, its first token: the counter
#           is raised to it (never lowered) and our seeding claim is dropped,
# ARGV[5] = how long a seeding claim lasts, in ms.
# Returns {1, token, value, acquired_ms} when granted,
#         {0, holder's value, holder's remaining ms, counter} when held,
#         {2, 'lost' | 'full', counter} when this caller must record a new epoch first: the
#           counter is missing (Redis lost it; the caller now holds the seeding claim) or
#           its epoch has no sequence number left,
#         {3, claim's remaining ms} when another caller is recording the new epoch.
#         Nothing but the claim was written in cases 2 and 3.
# The claim keeps a crowd that finds the counter gone from each recording an epoch of its
# own (every epoch but the last would be refused by advance_fence). TIME is Redis's clock,
# so every client agrees on when a lease was granted. Counters stay below 2**53, so Lua's
# double arithmetic on them is exact.
ACQUIRE_LUA = """
local counter = redis.call('GET', KEYS[2])
counter = counter and tonumber(counter)
if ARGV[4] ~= '' then
    local floor = tonumber(ARGV[4])
    if not counter or counter < floor then
        redis.call('SET', KEYS[2], ARGV[4])
        counter = floor
    end
    if redis.call('GET', KEYS[3]) == ARGV[1] then
        redis.call('DEL', KEYS[3])
    end
elseif not counter then
    if redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[5]) then
        return {2, 'lost', false}
    end
    return {3, redis.call('PTTL', KEYS[3])}
end
if counter % 4294967296 == 4294967295 then
    return {2, 'full', counter}
end
local now = redis.call('TIME')
local acquired_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local value = ARGV[1] .. '|' .. acquired_ms .. '|' .. ARGV[3]
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    return {1, redis.call('INCR', KEYS[2]), value, acquired_ms}
end
return {0, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), counter}
"""

# KEYS[1] = lock:{resource}; ARGV[1] = the value our grant stored.
# Deletes the key only if it is still ours. Returns 1 if deleted, 0 otherwise.
RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS[1] = lock:{resource}; ARGV[1] = the value our grant stored, ARGV[2] = new ttl in ms.
# Resets the expiry only if the lease is still ours. Returns 1 if extended, 0 otherwise.
EXTEND_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS[1] = fence:{resource}; ARGV[1] = the lowest value the counter may have.
# Raises the counter to ARGV[1] if it is below; never lowers it. Returns the counter.
RESEED_LUA = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if current < floor then
    redis.call('SET', KEYS[1], ARGV[1])
    return floor
end
return current
"""

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
    where = f"{socket.gethostname()} pid {os.getpid()}"
    label = f"{holder} on {where}" if holder else where
    # The label is metadata inside the lock value; keep it short and on one line.
    return " ".join(label.split())[:200]


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


# Registering a script hashes its text (SHA1), and run_fenced builds a FenceLock per
# operation: keep the registered scripts per client, not per FenceLock (a lock cycle is
# two round trips of ~30 µs each; four hashings per cycle cost ~6 µs of it).
_SCRIPTS: "weakref.WeakKeyDictionary[object, tuple]" = weakref.WeakKeyDictionary()


def _scripts_for(client) -> tuple:
    """Return the acquire, release, extend and reseed scripts registered on ``client``."""
    scripts = _SCRIPTS.get(client)
    if scripts is None:
        sources = (ACQUIRE_LUA, RELEASE_LUA, EXTEND_LUA, RESEED_LUA)
        scripts = tuple(client.register_script(lua) for lua in sources)
        _SCRIPTS[client] = scripts
    return scripts


class FenceLock:
    """Grants leases with fencing tokens on the configured Redis.

    ``FenceLock()`` uses the client that ``LOCK_REDIS_URL`` configures; pass ``client`` to
    use another (tests, benchmarks). Scripts are registered once per client and run with
    EVALSHA, so acquire, release and extend are one round trip each. Two cases add work to
    a grant: a counter Redis lost (or a resource's first grant) records a new epoch in the
    database first (locking/epochs.py), and with ``min_replicas`` the grant and a ``WAIT``
    for that many replicas go in one pipeline on one connection.
    """

    def __init__(
        self,
        client=None,
        *,
        using: str | None = None,
        min_replicas: int | None = None,
        replica_timeout: timedelta | None = None,
    ):
        self.client = client if client is not None else get_lock_redis()
        self._acquire, self._release, self._extend, self._reseed = _scripts_for(self.client)
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
        ttl_ms = int(ttl.total_seconds() * 1000)
        if ttl_ms <= 0:
            raise ValueError("ttl must be positive")
        label = holder_label(holder)
        deadline = time.monotonic() + wait.total_seconds() if wait else None
        attempt = 0
        while True:
            try:
                return self._try_acquire(resource, ttl_ms, label)
            except LockHeld:
                remaining = deadline - time.monotonic() if deadline is not None else 0
                if remaining <= 0:
                    raise
                cap = min(_BACKOFF_CAP_SECONDS, _BACKOFF_BASE_SECONDS * 2**attempt)
                time.sleep(min(remaining, random.uniform(0, cap)))
                attempt += 1

    def _try_acquire(self, resource: str, ttl_ms: int, label: str) -> "Lease":
        owner = secrets.token_hex(16)
        started = time.monotonic()
        reply = self._grant(resource, owner, ttl_ms, label, floor="")
        while reply[0] == 3:
            # Another caller is recording the new epoch: a few milliseconds, normally. If it
            # died, its claim expires and the next attempt here records the epoch instead.
            time.sleep(min(max(int(reply[1]), 1), _SEEDING_POLL_MS) / 1000)
            started = time.monotonic()
            reply = self._grant(resource, owner, ttl_ms, label, floor="")
        if reply[0] == 2:
            # The counter is gone (or its epoch is used up): record a new epoch in the
            # database, then grant from its first token. Nothing was written before.
            floor = self.start_epoch(resource, above=int(reply[2] or 0))
            reply = self._grant(resource, owner, ttl_ms, label, floor=str(floor))
            if reply[0] == 2:
                raise LockUnavailable(resource, "the fence counter could not be reseeded")
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
        keys = [lock_key(resource), fence_key(resource), seed_key(resource)]
        args = [owner, ttl_ms, label, floor, _SEEDING_CLAIM_MS]
        try:
            if not self.min_replicas:
                return self._acquire(keys=keys, args=args)
            reply, confirmed = self._grant_and_wait(keys, args)
        except RedisError as exc:
            logger.warning(
                "lock service unavailable", extra={"resource": resource, "error": str(exc)}
            )
            raise LockUnavailable(resource, str(exc) or exc.__class__.__name__) from exc
        if reply[0] == 1 and confirmed < self.min_replicas:
            # If the release fails the lease expires on its own; its token is never used.
            with contextlib.suppress(RedisError):
                self._release(keys=[keys[0]], args=[_text(reply[2])])
            logger.warning(
                "grant not confirmed by replicas; released",
                extra={"resource": resource, "token": int(reply[1]), "replicas": confirmed},
            )
            raise LockUnavailable(
                resource,
                f"{confirmed} of {self.min_replicas} replicas confirmed the grant "
                f"within {self.replica_timeout_ms} ms",
            )
        return reply

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

    # -- the counter ---------------------------------------------------------------------

    def current_token(self, resource: str) -> int:
        """Return the fence counter of ``resource`` (0 if Redis has none)."""
        validate_resource(resource)
        try:
            raw = self.client.get(fence_key(resource))
        except RedisError as exc:
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

    def reseed(self, resource: str, at_least: int) -> int:
        """Raise the fence counter of ``resource`` to at least ``at_least``; never lower it."""
        validate_resource(resource)
        try:
            counter = int(self._reseed(keys=[fence_key(resource)], args=[int(at_least)]))
        except RedisError as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        logger.warning(
            "fence counter raised to a new epoch",
            extra={"resource": resource, "token": counter},
        )
        return counter

    # -- operators' view -----------------------------------------------------------------

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
                resource = resource_from_lock_key(key)
                pipe = self.client.pipeline(transaction=False)
                pipe.get(key)
                pipe.pttl(key)
                pipe.get(fence_key(resource))
                value, pttl, counter = pipe.execute()
                if value is None:
                    continue  # released or expired since SCAN saw it
                owner, acquired_at, label = parse_lock_value(_text(value))
                infos.append(
                    HolderInfo(
                        resource=resource,
                        owner=owner,
                        label=label,
                        acquired_at=acquired_at,
                        ttl_left=timedelta(milliseconds=max(int(pttl), 0)),
                        token=int(counter) if counter is not None else None,
                    )
                )
        except RedisError as exc:
            raise LockUnavailable(prefix or "*", str(exc)) from exc
        return sorted(infos, key=lambda info: info.resource)


@dataclass
class Lease:
    """A granted lease. Use it as a context manager to release it on exit."""

    resource: str
    token: int
    owner: str
    expires_at: datetime
    _lock: FenceLock = field(repr=False)
    _value: str = field(repr=False)
    _monotonic_deadline: float = field(repr=False)
    lost: bool = field(default=False)
    # The TTL last granted or extended: what keep_alive() renews to by default.
    _ttl: timedelta | None = field(default=None, repr=False)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    @property
    def probably_valid(self) -> bool:
        """Whether the lease can still be ours by this process's monotonic clock.

        A hint for skipping doomed work, never a safety check: the fence is that.
        """
        return not self.lost and time.monotonic() < self._monotonic_deadline

    def release(self) -> bool:
        """Delete the lock if it is still ours. False if it expired or was taken over.

        If Redis cannot be reached the lease is left to expire on its own (False).
        """
        try:
            released = bool(self._lock._release(keys=[lock_key(self.resource)], args=[self._value]))
        except RedisError as exc:
            logger.warning(
                "could not release lease; it will expire",
                extra={"resource": self.resource, "token": self.token, "error": str(exc)},
            )
            released = False
        self.lost = True
        return released

    def extend(self, ttl: timedelta) -> bool:
        """Reset the lease's expiry to ``ttl`` from now if it is still ours."""
        ttl_ms = int(ttl.total_seconds() * 1000)
        if ttl_ms <= 0:
            raise ValueError("ttl must be positive")
        started = time.monotonic()
        try:
            extended = bool(
                self._lock._extend(keys=[lock_key(self.resource)], args=[self._value, ttl_ms])
            )
        except RedisError as exc:
            logger.warning(
                "could not extend lease",
                extra={"resource": self.resource, "token": self.token, "error": str(exc)},
            )
            extended = False
        if extended:
            self._ttl = ttl
            self._monotonic_deadline = started + ttl_ms / 1000
            self.expires_at = datetime.now(tz=UTC) + ttl
        else:
            self.lost = True
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
        ttl = ttl or self._ttl
        if ttl is None:
            ttl = timedelta(seconds=max(self._monotonic_deadline - time.monotonic(), 0))
        return KeepAlive(self, ttl)


class KeepAlive:
    """Background renewal of a lease; stops and marks the lease lost when an extend fails."""

    def __init__(self, lease: Lease, ttl: timedelta):
        if ttl.total_seconds() <= 0:
            raise ValueError("keep_alive needs a positive ttl")
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
