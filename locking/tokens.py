"""What every entry point that takes a fencing token takes: the lease, or its ``FencingToken``.

A token alone is a number; the fence cannot check a number. It needs the resource the number
was granted for (a resource's durable record holds its epoch and the newest token fenced:
locking/epochs.py) and which grant it was (two holders can only share a number when Redis
handed it out twice, and then the second one must be refused, while one lease fencing its
row a second time must pass). So ``advance_fence``, ``aadvance_fence``, ``insert_fenced``,
``seal_call``, ``StaleAtReceiver.from_answer`` and the webhook clients built on them take the
``Lease`` itself, or a ``FencingToken`` (``lease.fencing_token``: the same three facts, as a
plain value that can cross a process boundary), and refuse a bare ``int`` with a
``TypeError`` that says what to pass.
"""

from dataclasses import dataclass
from typing import Protocol

from locking.keys import validate_resource


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
