"""The lock's Lua scripts, one module constant each, and their registration per client.

Each script runs atomically in Redis and touches only the keys of one resource, which
share a hash slot (``lock:{r}``, ``fence:{r}``, ``seed:{r}``; see locking/keys.py), so each
is one round trip on a single server, Sentinel or Cluster. The header comment of each
constant says what ``KEYS`` and ``ARGV`` it takes and what it returns. They are registered
once per client (``register_script``: EVALSHA, with a reload when a restarted Redis forgot
them) and shared by the sync and the async lock: one text, one SHA, both APIs. So is what
the grant script's replies mean (``busy``, ``epoch_cause``…) and how long to wait after one
before trying again (``backoff_seconds``, ``seed_poll_seconds``): each lock sends the script
its own way and reads the answer with the same functions.
"""

import functools
import logging
import random
import weakref
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from redis.exceptions import NoScriptError

from locking.exceptions import LockHeld, LockUnavailable
from locking.keys import fence_key, lock_key, parse_lock_value, seed_key, validate_resource
from locking.outcomes import EpochCause

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

# KEYS[1] = lock:{resource}, KEYS[2] = fence:{resource}.
# ARGV[1] = the token the operator was shown ('' when the lease was shown without one: no
#           counter), ARGV[2] = the owner id shown ('' to compare the token only).
# Deletes the lease only if it is still the one shown: an operator's hand on a stuck
# holder, never on the healthy holder that took over since the page was drawn. The token
# is the counter: every grant increments it, so a new holder always has another one.
# Returns {1, value, remaining ms, counter} of the lease it deleted,
#         {0, value, remaining ms, counter} of the lease held instead (nothing deleted),
#         or an empty list when nothing is held.
# The counter is untouched: the next grant still gets a larger token.
BREAK_LUA = """
local value = redis.call('GET', KEYS[1])
if not value then
    return {}
end
local pttl = redis.call('PTTL', KEYS[1])
local counter = redis.call('GET', KEYS[2])
local same_token
if ARGV[1] == '' then
    same_token = not counter
else
    same_token = counter ~= false and tonumber(counter) == tonumber(ARGV[1])
end
local same_owner = ARGV[2] == '' or string.sub(value, 1, #ARGV[2] + 1) == ARGV[2] .. '|'
if not (same_token and same_owner) then
    return {0, value, pttl, counter}
end
redis.call('DEL', KEYS[1])
return {1, value, pttl, counter}
"""


class Scripts(NamedTuple):
    """The scripts registered on one client: ``scripts.acquire(keys=…, args=…)``."""

    acquire: object
    release: object
    extend: object
    reseed: object
    break_lease: object


# Registering a script hashes its text (SHA1), and run_fenced builds a FenceLock per
# operation: keep the registered scripts per client, not per FenceLock (a lock cycle is
# two round trips of ~30 µs each; four hashings per cycle cost ~6 µs of it). A
# ``redis.asyncio`` client registers the same sources: one text, one SHA, both APIs.
_SCRIPTS: "weakref.WeakKeyDictionary[object, Scripts]" = weakref.WeakKeyDictionary()


def scripts_for(client) -> Scripts:
    """Return the lock's scripts registered on ``client`` (sync or ``redis.asyncio``)."""
    global _last
    ref, scripts = _last  # a process mostly asks for one client's: no weakref made per call
    if ref() is client:
        return scripts
    scripts = _SCRIPTS.get(client)
    if scripts is None:
        sources = (ACQUIRE_LUA, RELEASE_LUA, EXTEND_LUA, RESEED_LUA, BREAK_LUA)
        scripts = Scripts(*(client.register_script(lua) for lua in sources))
        _SCRIPTS[client] = scripts
    _last = (weakref.ref(client), scripts)
    return scripts


# The client asked for last and its scripts (a weak reference: a dropped client goes).
_last: tuple = (lambda: None, None)


def run_script(client, script, keys, args):
    """``script(keys=keys, args=args)`` on the sync ``client`` it was registered on: EVALSHA,
    and after a NOSCRIPT answer (a restarted Redis forgot it) SCRIPT LOAD and EVALSHA again,
    as redis-py's ``Script.__call__`` does, without the import, the copies and the
    pipeline check it makes on every call (~0.3 µs each, two per lock cycle)."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        script.sha = client.script_load(script.script)
        return client.evalsha(script.sha, len(keys), *keys, *args)


# -- the grant script's arguments and replies (ACQUIRE_LUA's header says what each is) ----

# Recording a new epoch is one database round trip; a claim outlives it comfortably. A
# caller that finds another's claim polls at most this often.
SEEDING_CLAIM_MS = 2000
SEEDING_POLL_MS = 5

# Backoff for acquire(wait=...): full jitter between 0 and an exponentially growing cap.
BACKOFF_BASE_SECONDS = 0.01
BACKOFF_CAP_SECONDS = 0.25

# What the grant script's reply (and the replicas' confirmation) leaves unavailable.
UNSEEDABLE = "the fence counter could not be reseeded"


def grant_keys_args(resource, owner, ttl_ms, label, floor) -> tuple[tuple, list]:
    """The keys and arguments of the grant script (``ACQUIRE_LUA`` above)."""
    return grant_keys(resource), [owner, ttl_ms, label, floor, SEEDING_CLAIM_MS]


def grant_keys(resource: str) -> tuple[str, str, str]:
    """``(lock:{r}, fence:{r}, seed:{r})`` of a valid resource name, else ``ValueError``.

    Built once per resource (a process grants the same few again and again); a bad name
    raises every time (an exception is never cached)."""
    try:
        return _grant_keys(resource)
    except TypeError:  # unhashable: not a string, which validate_resource says
        validate_resource(resource)
        raise


@functools.lru_cache(maxsize=4096)
def _grant_keys(resource: str) -> tuple[str, str, str]:
    validate_resource(resource)
    return lock_key(resource), fence_key(resource), seed_key(resource)


def text(raw) -> str:
    """A Redis reply as ``str`` (a client without ``decode_responses`` answers bytes)."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def backoff_seconds(attempt: int, remaining: float) -> float:
    """Full jitter between 0 and an exponentially growing cap, never past the deadline."""
    cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt)
    return min(remaining, random.uniform(0, cap))


def seed_poll_seconds(reply: list) -> float:
    # Another caller is recording the new epoch: a few milliseconds, normally. If it died,
    # its claim expires and the next attempt here records the epoch instead.
    return min(max(int(reply[1]), 1), SEEDING_POLL_MS) / 1000


def epoch_cause(reply: list) -> EpochCause:
    """Why a grant script's "record an epoch" reply (``{2, 'lost'|'full', counter}``) asks."""
    return EpochCause.SEQUENCE_EXHAUSTED if text(reply[1]) == "full" else EpochCause.COUNTER_LOST


def busy(resource: str, reply: list) -> LockHeld:
    """The answer to a grant script's "held" reply (``{0, value, PTTL, counter}``)."""
    holder_owner, acquired_at, holder = parse_lock_value(text(reply[1]))
    retry_after = timedelta(milliseconds=max(int(reply[2]), 0))
    return LockHeld(
        resource,
        holder=holder or holder_owner,
        retry_after=retry_after,
        acquired_at=acquired_at,
        expires_at=datetime.now(tz=UTC) + retry_after,
        token=int(reply[3]) if reply[3] is not None else None,
    )


def unavailable(resource: str, exc: Exception) -> LockUnavailable:
    logger.warning("lock service unavailable", extra={"resource": resource, "error": str(exc)})
    return LockUnavailable(resource, str(exc) or exc.__class__.__name__)


def unconfirmed(
    resource: str, reply: list, confirmed: int, *, min_replicas: int, timeout_ms: int
) -> LockUnavailable:
    logger.warning(
        "grant not confirmed by replicas; released",
        extra={"resource": resource, "token": int(reply[1]), "replicas": confirmed},
    )
    return LockUnavailable(
        resource,
        f"{confirmed} of {min_replicas} replicas confirmed the grant within {timeout_ms} ms",
    )
