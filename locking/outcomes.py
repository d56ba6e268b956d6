"""What a fenced attempt came to: the one vocabulary of the audit, the metrics and the pages.

``Outcome`` is Django's ``TextChoices``, which is an ``enum.StrEnum``: a member *is* its
string (``Outcome.BUSY == "busy"``), so it goes into the database, a log record or a metrics
label as is, and ``Outcome.choices`` feeds a model field or a form. It imports no model, so
any module (exceptions, metrics, services) can use it before the app registry is ready.

``LeaseState`` is the other word a holder reads: what it can know of its lease right now
(``lease.state``: held, uncertain, lost, released; locking/lease.py has the transitions).
``HolderState`` is what an operator reads of a lease from outside (``HolderInfo.state``).
"""

import enum
from typing import Protocol, runtime_checkable

from django.db.models.enums import TextChoices
from django.utils.translation import gettext_lazy as _


class Outcome(TextChoices):
    """The outcome of one fenced attempt, as ``FenceEvent.outcome`` records it."""

    COMMITTED = "committed", _("Committed")
    ALREADY_DONE = "already_done", _("Already done")
    # The state the caller decided on changed before its commit (another assignment became
    # active); nothing was written.
    CONFLICT = "conflict", _("Changed since viewed")
    STALE = "stale", _("Stale token rejected")
    BUSY = "busy", _("Busy (lock held)")
    FAILED = "failed", _("Failed")
    UNAVAILABLE = "unavailable", _("Lock service unavailable")
    DENIED = "denied", _("Denied")
    # The work stopped itself because its lease was lost (``lease.check()`` raised
    # ``LeaseLost``) before it reached the fence; nothing was written.
    LOST = "lost", _("Lease lost")
    # An operator deleted a stuck lease (``break_lease``); the holder's late write
    # is refused by the fence once a newer holder has committed.
    BROKEN = "broken", _("Lease broken by an operator")
    # The external call may have been acted on and its answer does not say (a timeout, a
    # lost connection, a redirect, a 5xx): recorded, to be settled by the same key.
    UNKNOWN = "unknown", _("Outside outcome unknown")


@runtime_checkable
class HasOutcome(Protocol):
    """A result or an exception that says which outcome it is, e.g. ``Outcome.ALREADY_DONE``
    for a result, ``outcome = Outcome.FAILED`` as the class attribute of an exception."""

    outcome: Outcome


class LeaseState(enum.StrEnum):
    """What the holder can know of its lease (``lease.state``)."""

    HELD = "held"  # confirmed by Redis, and its TTL not run out by this process's clock
    UNCERTAIN = "uncertain"  # a renewal failed or Redis did not answer: it may still run
    LOST = "lost"  # Redis says it is not ours, or its TTL surely passed
    RELEASED = "released"  # its holder let it go (release(), the end of its with block)

    @property
    def is_over(self) -> bool:
        """``LOST`` or ``RELEASED``: final; ``check()`` refuses, ``extend()`` sends nothing."""
        return self is LeaseState.LOST or self is LeaseState.RELEASED


class HolderState(TextChoices):
    """What Redis says of a held lease, as an operator sees it (``HolderInfo.state``).

    Only the holder knows whether it is uncertain or lost (``LeaseState``); from outside a
    lease is held until it is released, expires or is broken.
    """

    HELD = "held", _("held")  # its TTL runs: it ends by itself unless its holder renews it
    # A lock key without a TTL: never written so by locking (a restore, a SET by hand), and
    # nothing ends it but a break.
    NO_EXPIRY = "no_expiry", _("never expires")


class EpochCause(enum.StrEnum):
    """Why a resource's fence started a new epoch (locking/epochs.py), as its metric says."""

    FIRST_GRANT = "first_grant"  # the resource's first grant ever (or prepare_fences)
    COUNTER_LOST = "counter_lost"  # the grant found the Redis counter gone
    COUNTER_BEHIND = "counter_behind"  # a refused token showed the counter behind
    SEQUENCE_EXHAUSTED = "sequence_exhausted"  # 2**32 - 1 grants used up the epoch


class LossCause(enum.StrEnum):
    """How a lease became ``LOST`` (its metric's ``reason``)."""

    REFUSED = "refused"  # Redis refused an extend: another owner, or none
    TTL_PASSED = "ttl_passed"  # its TTL surely passed by this process's clock
    MARKED = "marked"  # its holder marked it lost (``lease.lost.set()``)


class RefusedBy(enum.StrEnum):
    """Who refused a stale write: this side's fence, or the service the call went to."""

    FENCE = "fence"  # advance_fence: a newer token (or epoch) is recorded
    RECEIVER = "receiver"  # the receiving service answered 409 (``StaleAtReceiver``)
