"""Resource names, the Redis keys derived from them, what the lock key holds, and the fencing
token that names a grant (``FencingToken``: resource, token, owner).

``lock:{<resource>}`` holds the lease, ``fence:{<resource>}`` the token counter (never
deleted, never expiring), ``seed:{<resource>}`` a short claim while a new epoch is recorded
after Redis lost the counter. The braces are a Redis Cluster hash tag: both keys hash to
one slot, so one script may touch both.

The lock key's value is ``<owner id>|<acquired ms>|<holder label>``: a random owner id, so
that release and extend (compare-and-delete, compare-and-pexpire) can never touch another
holder's lease, plus what an operator needs to see who holds it and since when. The grant
script writes it (locking/scripts.py); the sync and the async lock make the owner id and the
label, the operators' tools read it back (``parse_lock_value``).
"""

import functools
import itertools
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["fence_key", "lock_key", "validate_resource"]

MAX_RESOURCE_LENGTH = 200


def validate_resource(resource: str) -> str:
    """Return ``resource`` if it is a usable name, else raise ``ValueError``.

    Checked before any Redis call: non-empty, at most 200 characters, printable, no
    whitespace, no ``{`` or ``}`` (they would break the hash tag).
    """
    if not isinstance(resource, str):
        raise ValueError(f"resource name must be a string, got {type(resource).__name__}")
    if not resource:
        raise ValueError("resource name must not be empty")
    if len(resource) > MAX_RESOURCE_LENGTH:
        raise ValueError(f"resource name is longer than {MAX_RESOURCE_LENGTH} characters")
    # isprintable() is False for every whitespace character but the ASCII space.
    if not resource.isprintable() or " " in resource:
        raise ValueError("resource name must be printable and contain no whitespace")
    if "{" in resource or "}" in resource:
        raise ValueError("resource name must not contain '{' or '}'")
    return resource


def resource_kind(resource: str) -> str:
    """Return the kind of a resource: its name up to the first ``:`` (``monthly-charges``).

    What spans and metrics name instead of the resource itself, whose name carries tenant
    and row ids (a label per resource would grow without bound)."""
    return resource.partition(":")[0]


def lock_key(resource: str) -> str:
    """Return the Redis key of ``resource``'s lease: ``lock:{<resource>}``."""
    return "lock:{" + resource + "}"


def fence_key(resource: str) -> str:
    """Return the Redis key of ``resource``'s token counter: ``fence:{<resource>}``."""
    return "fence:{" + resource + "}"


def seed_key(resource: str) -> str:
    """A short-lived claim by the one caller recording a new epoch (locking/epochs.py)."""
    return "seed:{" + resource + "}"


def resource_from_lock_key(key: str) -> str:
    return key[len("lock:{") : -1]


def from_ms(epoch_ms: int) -> datetime:
    """Milliseconds since the epoch by Redis's clock (its ``TIME``), as an aware datetime."""
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


# -- TTLs: a ``timedelta`` wherever one is taken (a bare number would be seconds to one
# reader and milliseconds to another), whole milliseconds for Redis.

TTL_TYPE_ERROR = "ttl must be a datetime.timedelta, e.g. timedelta(seconds=5)"


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


# -- the fencing token ----------------------------------------------------------------------
#
# What every entry point that takes a fencing token takes: the lease, or its ``FencingToken``.
# A token alone is a number; the fence cannot check a number. It needs the resource the
# number was granted for (a resource's durable record holds its epoch and the newest token
# fenced: locking/epochs.py) and which grant it was (two holders can only share a number when
# Redis handed it out twice, and then the second one must be refused, while one lease fencing
# its row a second time must pass). So ``advance_fence``, ``aadvance_fence``,
# ``insert_fenced``, ``seal_call``, ``StaleAtReceiver.from_answer`` and the webhook clients
# built on them take the ``Lease`` itself, or a ``FencingToken`` (``lease.fencing_token``:
# the same three facts, as a plain value that can cross a process boundary), and refuse a
# bare ``int`` with a ``TypeError`` that says what to pass.

# A token is ``epoch * 2**32 + sequence``: Redis counts the sequence, PostgreSQL keeps the
# epoch (locking/epochs.py).
SEQUENCE_BITS = 32


def epoch_of(token: int) -> int:
    """Return the epoch a token was granted in."""
    return int(token) >> SEQUENCE_BITS


@dataclass(frozen=True, slots=True)
class FencingToken:
    """A grant's fencing token with what the fence needs to check it.

    ``resource``: the name the lease was granted on; ``token``: its number (``epoch * 2**32
    + sequence``); ``owner``: the grant's owner id (unique per grant), which tells one lease
    fencing twice from a number Redis handed out twice; ``using``: the database alias of
    the resource's durable record (``None``: ``LOCK_DATABASE``).
    """

    resource: str
    token: int
    owner: str
    using: str | None = None

    def __post_init__(self) -> None:
        validate_resource(self.resource)
        if type(self.token) is not int or self.token <= 0:
            raise ValueError(f"a fencing token is a positive int, got {self.token!r}")
        if not isinstance(self.owner, str) or not self.owner:
            raise ValueError("a fencing token names the grant's owner id (lease.owner)")

    def __int__(self) -> int:
        return self.token


class HasFencingToken(Protocol):
    """What carries a grant's fencing token: a ``Lease`` or an ``AsyncLease`` (a protocol,
    so that this module, which the leases import, names neither)."""

    @property
    def fencing_token(self) -> FencingToken: ...


# What every entry point that takes a token takes, as its annotation says it.
LeaseOrToken = HasFencingToken | FencingToken


def fencing_token_of(value: object, *, taken_by: str) -> FencingToken:
    """``value`` as a ``FencingToken``: a lease gives its own; anything else is refused.

    ``taken_by`` names the entry point, for the message. A bare ``int`` (``lease.token``)
    is the mistake this exists for: it carries neither the resource nor the grant.
    """
    if isinstance(value, FencingToken):
        return value
    fencing = getattr(value, "fencing_token", None)  # a Lease (no import: no cycle)
    if isinstance(fencing, FencingToken):
        return fencing
    raise TypeError(
        f"{taken_by}() takes the lease (or its lease.fencing_token), not "
        f"{type(value).__name__} {value!r}: pass `lease`, not `lease.token`. The fence "
        "checks the token against its resource's epoch and grant, which a bare number "
        "does not carry."
    )
