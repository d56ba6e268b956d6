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

from redis.exceptions import RedisError

from locking.connection import get_lock_redis
from locking.exceptions import LockHeld, LockUnavailable
from locking.keys import fence_key, lock_key, resource_from_lock_key, validate_resource

logger = logging.getLogger(__name__)

# KEYS[1] = lock:{resource}, KEYS[2] = fence:{resource}
# ARGV[1] = owner id (random), ARGV[2] = ttl in ms, ARGV[3] = holder label
# Returns {1, token, value, acquired_ms} when granted,
#         {0, holder's value, holder's remaining ms, current counter} when held.
# TIME is Redis's clock, so every client agrees on when a lease was granted.
ACQUIRE_LUA = """
local now = redis.call('TIME')
local acquired_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local value = ARGV[1] .. '|' .. acquired_ms .. '|' .. ARGV[3]
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    return {1, redis.call('INCR', KEYS[2]), value, acquired_ms}
end
return {0, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
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
    EVALSHA, so acquire, release and extend are one round trip each.
    """

    def __init__(self, client=None):
        self.client = client if client is not None else get_lock_redis()
        self._acquire, self._release, self._extend, self._reseed = _scripts_for(self.client)

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
        try:
            reply = self._acquire(
                keys=[lock_key(resource), fence_key(resource)], args=[owner, ttl_ms, label]
            )
        except RedisError as exc:
            logger.warning(
                "lock service unavailable", extra={"resource": resource, "error": str(exc)}
            )
            raise LockUnavailable(resource, str(exc) or exc.__class__.__name__) from exc
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
            counter = int(self._reseed(keys=[fence_key(resource)], args=[int(at_least)]))
        except RedisError as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        logger.warning(
            "fence counter reseeded from the database",
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
