"""Exceptions named for the caller, each carrying the facts a caller shows.

Each one that ends a fenced attempt declares its ``outcome``: what ``run_fenced`` records
in the audit when it passes through.
"""

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from locking.keys import LeaseOrToken, fencing_token_of
from locking.outcomes import Outcome

if TYPE_CHECKING:
    from locking.receiving.signing import SealedCall


class LockError(Exception):
    """Base class of everything the locking app raises on purpose."""


class LockHeld(LockError):
    """Another holder owns the lease; nothing was written."""

    outcome = Outcome.BUSY

    def __init__(
        self,
        resource: str,
        *,
        holder: str,
        retry_after: timedelta,
        acquired_at: datetime | None = None,
        expires_at: datetime | None = None,
        token: int | None = None,
    ):
        self.resource = resource
        self.holder = holder
        self.retry_after = retry_after
        self.acquired_at = acquired_at  # Redis clock, from the holder's grant
        self.expires_at = expires_at  # when the holder's lease runs out unless extended
        self.token = token
        super().__init__(
            f"{resource} is held by {holder or 'another process'} "
            f"(retry in {retry_after.total_seconds():.1f}s)"
        )


class LockUnavailable(LockError):
    """The lock service (Redis) could not be reached or timed out; nothing was written."""

    outcome = Outcome.UNAVAILABLE

    def __init__(self, resource: str, reason: str):
        self.resource = resource
        self.reason = reason
        super().__init__(f"lock service unavailable for {resource}: {reason}")


class StaleFencingToken(LockError):
    """A newer holder's token is already recorded, or the token's epoch was superseded
    (Redis lost its counter after this grant): this holder lost its lease.

    ``epoch`` is the resource's current epoch when the token was refused for its epoch,
    else ``None``. ``row`` names the fenced row when the row, not the resource's record,
    holds the higher token (``recorded``): fenced under another resource name, or written
    by hand; ``row_resources`` are the resources whose record holds that token (the names
    the row was most likely fenced under; empty when none does).
    """

    outcome = Outcome.STALE
    # The token recorded instead; ``None`` only for a receiver's refusal that did not say.
    recorded: int | None

    def __init__(
        self,
        token: int,
        recorded: int,
        *,
        epoch: int | None = None,
        resource: str = "",
        row: str = "",
        row_resources: tuple[str, ...] = (),
    ):
        self.token = token
        self.recorded = recorded
        self.epoch = epoch
        self.resource = resource
        self.row = row
        self.row_resources = row_resources
        if epoch is None and row:
            by = (
                f"recorded by {', '.join(map(repr, row_resources))}"
                if row_resources
                else "which no resource's record holds: written by hand or an old fixture"
            )
            message = (
                f"fencing token {token} of {resource!r} is stale: {row} already records token "
                f"{recorded}, which {resource!r} never recorded ({by}). One row, one "
                "resource name: fence the row under the resource it was fenced under."
            )
        elif epoch is None:
            message = (
                f"fencing token {token} is stale: the resource already recorded token {recorded}"
            )
        else:
            message = (
                f"fencing token {token} is stale: it was granted before epoch {epoch} began "
                "(Redis lost the counter after this grant)"
            )
        super().__init__(message)


class StaleAtReceiver(StaleFencingToken):
    """The service a fenced call went to refused its token (HTTP 409): it had already
    accepted a call with a higher one, ``accepted``, for the same key (``None`` when its
    answer did not say which in a way the sender can trust). A newer holder got there
    first; nothing was written here.

    A ``StaleFencingToken``: ``run_fenced`` records it as ``stale``, and when the Redis
    counter is below ``accepted`` (and ``accepted`` is a token of an epoch the resource
    has had) it starts a new epoch above it and tries once more, as for a refusal by the
    fence. Raised by ``post_fenced`` (through ``from_answer``), for the answer of locking's
    receiver (``fenced_receiver``, ``receive_call``) or any that answers 409 so.
    """

    def __init__(self, token: int, accepted: int | None, *, url: str = ""):
        self.url = url
        self.accepted = accepted
        newer = f"token {accepted}" if accepted is not None else "a higher token"
        LockError.__init__(
            self, f"fencing token {token} is stale: the receiver had already accepted {newer}"
        )
        self.token = token
        self.recorded = accepted
        self.epoch = None
        self.resource, self.row, self.row_resources = "", "", ()

    @classmethod
    def from_answer(
        cls,
        token: LeaseOrToken,
        content: bytes,
        *,
        headers: Mapping[str, str],
        sent: "SealedCall",
        secret: str,
        url: str = "",
    ) -> "StaleAtReceiver":
        """The refusal a receiver's 409 answer states (``{"accepted": n}``), for the call
        ``sent`` under ``token`` (the lease, or its ``fencing_token``).

        ``accepted`` is taken only from an answer signed with ``secret`` that names the
        call ``sent`` (``locking.receiving.signing.open_answer``) and only when it is above the
        refused token: anyone on the HTTP path can send a 409, and the number it states
        decides whether this holder starts a new epoch above it.
        """
        from locking.receiving.signing import open_answer

        fencing = fencing_token_of(token, taken_by="StaleAtReceiver.from_answer")
        facts = open_answer(headers, content, sent=sent, secret=secret)
        accepted = facts.get("accepted") if facts is not None else None
        if type(accepted) is not int or accepted <= fencing.token:
            accepted = None
        return cls(fencing.token, accepted, url=url)


class _OutsideCallError(LockError):
    """What ``post_fenced`` raises: the call's address, and how it ended."""

    ended = ""

    def __init__(
        self,
        url: str,
        reason: str,
        status: int | None = None,
        *,
        idempotency_key: str = "",
        endpoint: str = "",
    ):
        self.url = url
        self.reason = reason
        self.status = status
        self.idempotency_key = idempotency_key
        self.endpoint = endpoint
        super().__init__(f"call to {url} {self.ended}: {reason}")


class CallRefused(_OutsideCallError):
    """The service a fenced call went to refused it, or could not be reached: it did
    nothing. ``status`` is its 4xx answer, ``None`` when no connection was made (nothing
    was sent). Raised by ``post_fenced``; a 409 that says a newer holder's call was there
    first is ``StaleAtReceiver`` instead."""

    outcome = Outcome.FAILED
    ended = "failed"


class CallOutcomeUnknown(_OutsideCallError):
    """The call may have been acted on, and its answer does not say: a timeout once
    connected, a connection lost before the whole answer, a redirect, a 5xx (``reason``,
    ``status``). Settle it later by the same ``idempotency_key``: never "nothing was done".

    Not a ``CallRefused`` on purpose: a caller that knows only refusals must not take this
    for one. Raised by ``post_fenced``."""

    outcome = Outcome.UNKNOWN
    ended = "has an unknown outcome"


class LeaseLost(LockError):
    """The lease is no longer this holder's (expired, taken over, broken, released): the
    work stopped before spending more on an attempt whose write the fence would refuse.

    Raised by ``Lease.check()`` and by a ``keep_alive`` that cancels its work. An
    optimisation, never the safety: a holder that does not check still cannot commit
    after a newer holder, because the fence refuses its token.
    """

    outcome = Outcome.LOST

    def __init__(self, resource: str, token: int, reason: str):
        self.resource = resource
        self.token = token
        self.reason = reason
        super().__init__(f"lease on {resource} (token {token}) is lost: {reason}")


class LeaseUncertain(LeaseLost):
    """This holder cannot know whether its lease still runs: a renewal failed or Redis did
    not answer, and its TTL has not surely passed yet (``lease.state`` is ``UNCERTAIN``).

    Raised by ``Lease.check()`` so that nothing is sent out while the holder cannot know.
    A ``LeaseLost``: callers that stop on a lost lease stop on this one too, and
    ``run_fenced`` records it as ``lost``. Unlike a loss it may pass: a renewal that
    reaches Redis before the TTL runs out makes the lease ``HELD`` again.
    """

    def __init__(self, resource: str, token: int, reason: str):
        self.resource = resource
        self.token = token
        self.reason = reason
        Exception.__init__(self, f"lease on {resource} (token {token}) is uncertain: {reason}")
