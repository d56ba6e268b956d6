"""What the sync and the async lock share of a grant: the lock value, the script's arguments
and answers, and the waits between tries.

The lock value is ``<owner id>|<acquired ms>|<holder label>``: a random owner id, so that
release and extend (compare-and-delete, compare-and-pexpire) can never touch another
holder's lease, plus what an operator needs to see who holds it and since when. Nothing
here talks to Redis: ``locking/lock.py`` and ``locking/aio.py`` do, each its own way.
"""

import functools
import itertools
import logging
import os
import random
import secrets
import socket
from datetime import UTC, datetime, timedelta

from locking.exceptions import LockHeld, LockUnavailable
from locking.keys import fence_key, lock_key, seed_key, validate_resource
from locking.outcomes import EpochCause

logger = logging.getLogger(__name__)

# Recording a new epoch is one database round trip; a claim outlives it comfortably. A
# caller that finds another's claim polls at most this often.
SEEDING_CLAIM_MS = 2000
SEEDING_POLL_MS = 5

# Backoff for acquire(wait=...): full jitter between 0 and an exponentially growing cap.
BACKOFF_BASE_SECONDS = 0.01
BACKOFF_CAP_SECONDS = 0.25

# What the grant script's reply (and the replicas' confirmation) leaves unavailable.
UNSEEDABLE = "the fence counter could not be reseeded"


def from_ms(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def holder_label(holder: str = "") -> str:
    """Describe this process as a lock holder: ``<who> on <host> pid <pid>``."""
    label = _LABELS.get(holder)
    if label is None:
        label = _holder_label(holder, os.getpid())
        if len(_LABELS) < 1024:  # a handful of holders per process; never unbounded
            _LABELS[holder] = label
    return label


def _holder_label(holder: str, pid: int) -> str:
    where = f"{socket.gethostname()} pid {pid}"
    label = f"{holder} on {where}" if holder else where
    # The label is metadata inside the lock value; keep it short and on one line.
    return " ".join(label.split())[:200]


def new_owner() -> str:
    """A new owner id: 32 hex digits, never the same twice on any host or process.

    What release and extend compare, so what matters is that no two grants share one: a
    random 64-bit prefix per process (drawn again in a forked child) and a counter. A
    grant's hot path draws no random bytes (``secrets.token_hex`` is a system call, a few
    per cent of a lock cycle on a fast loopback).
    """
    return "%032x" % (_OWNER_BASE + _next_owner())  # the fastest spelling measured


# Per process, labels and the owner-id prefix (the high 64 bits of ``_OWNER_BASE``): a
# forked child (gunicorn's workers, the month start's worker processes) has another pid
# and must draw its own prefix.
_LABELS: dict[str, str] = {}
_OWNER_BASE = 0
_next_owner = itertools.count().__next__


def _new_process() -> None:
    global _OWNER_BASE, _next_owner
    _LABELS.clear()
    _OWNER_BASE, _next_owner = secrets.randbits(64) << 64, itertools.count().__next__


_new_process()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_process)


def parse_lock_value(value: str) -> tuple[str, datetime | None, str]:
    """Split a stored lock value into (owner id, acquired at, holder label)."""
    owner, _, rest = value.partition("|")
    acquired, _, label = rest.partition("|")
    acquired_at = from_ms(int(acquired)) if acquired.isdigit() else None
    return owner, acquired_at, label


def text(raw) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


# A TTL is a timedelta everywhere one is taken (acquire, aacquire, extend, keep_alive,
# run_fenced, LeasedAttempt): a bare number would be seconds to one reader and milliseconds
# to another, and failed deep inside as an AttributeError.
TTL_TYPE_ERROR = "ttl must be a datetime.timedelta, e.g. timedelta(seconds=5)"


def require_timedelta(ttl: object) -> None:
    """Raise ``TypeError`` unless ``ttl`` is a ``timedelta``."""
    if not isinstance(ttl, timedelta):
        raise TypeError(TTL_TYPE_ERROR)


def positive_ms(ttl: timedelta) -> int:
    require_timedelta(ttl)
    ttl_ms = int(ttl.total_seconds() * 1000)
    if ttl_ms <= 0:
        raise ValueError("ttl must be positive")
    return ttl_ms


def backoff_seconds(attempt: int, remaining: float) -> float:
    """Full jitter between 0 and an exponentially growing cap, never past the deadline."""
    cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt)
    return min(remaining, random.uniform(0, cap))


def seed_poll_seconds(reply: list) -> float:
    # Another caller is recording the new epoch: a few milliseconds, normally. If it died,
    # its claim expires and the next attempt here records the epoch instead.
    return min(max(int(reply[1]), 1), SEEDING_POLL_MS) / 1000


def grant_keys_args(resource, owner, ttl_ms, label, floor) -> tuple[tuple, list]:
    """The keys and arguments of the grant script (locking/scripts.py, ``ACQUIRE_LUA``)."""
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
