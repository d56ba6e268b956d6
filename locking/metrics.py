"""Prometheus metrics of fenced attempts and of what keeps them safe, never by resource.

Attempts are counted where every one passes (``run_fenced``), by operation and outcome; the
safety of leases and epochs where it happens, by ``resource_kind`` (the name up to its
first ``:``); a receiver's decisions by receiver and verdict. A resource name is never a
label. Every name and label: the documentation's 'Operating it' page.
"""

from prometheus_client import Counter, Histogram

from locking.keys import resource_kind
from locking.outcomes import EpochCause, LossCause, Outcome, RefusedBy

UNNAMED_OPERATION = "unnamed"

ACQUISITIONS = Counter(
    "fence_lease_acquisitions",
    "Leases granted, each with a new fencing token.",
    ["operation"],
)
BUSY = Counter(
    "fence_busy",
    "Attempts answered busy because another holder had the lease; nothing was written.",
    ["operation"],
)
STALE_REJECTIONS = Counter(
    "fence_stale_rejections",
    "Writes the fence check rejected because a newer holder had recorded a larger token.",
    ["operation"],
)
RESEEDS = Counter(
    "fence_counter_reseeds",
    "Fence counters raised from the database because Redis had lost them (restart, failover).",
    ["operation"],
)
EXTERNAL_CALL_FAILURES = Counter(
    "fence_external_call_failures",
    "Attempts whose external call failed (outcome 'failed'); nothing was written.",
    ["operation"],
)
CONFLICTS = Counter(
    "fence_conflicts",
    "Attempts refused because what the caller had seen changed before the commit.",
    ["operation"],
)
UNAVAILABLE = Counter(
    "fence_lock_unavailable",
    "Attempts refused because the lock's Redis could not be reached or timed out.",
    ["operation"],
)
DURATION = Histogram(
    "fenced_operation_duration_seconds",
    "Time from asking for the lease to the recorded outcome, external call included.",
    ["operation", "outcome"],
    # A busy answer takes a millisecond; a month of charges with a slow billing webhook
    # may take most of a minute.
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)

# -- safety -------------------------------------------------------------------------------

STALE_WRITES_REFUSED = Counter(
    "fence_stale_writes_refused",
    "Writes refused because a newer holder had been there first: by this side's fence "
    "(refused_by=fence) or by the service the fenced call went to (refused_by=receiver, "
    "its 409). Counter-behind refusals, which a new epoch and a retry follow, included.",
    ["operation", "refused_by"],
)
EPOCHS_STARTED = Counter(
    "fence_epochs_started",
    "Fence epochs recorded in the database, by cause: first_grant (a resource's first "
    "grant, or prepare_fences), counter_lost (Redis had no counter: a restart, a flush, "
    "eviction), counter_behind (a refused token showed the counter behind: a failover or "
    "an AOF that lost grants), sequence_exhausted (2**32 - 1 grants in one epoch).",
    ["resource_kind", "cause"],
)
LEASE_OVERRUN = Histogram(
    "fence_lease_overrun_seconds",
    "How long work ran past its lease's TTL, observed when the holder released the lease "
    "after the TTL (counted from before the last confirmed grant or extend was sent): a "
    "paused or slow holder, whose late write only the fence keeps out.",
    ["resource_kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
LEASES_UNCERTAIN = Counter(
    "fence_leases_uncertain",
    "Leases that became UNCERTAIN: a renewal failed or Redis did not answer (once per "
    "spell of doubt; a renewal that answers makes the lease HELD again).",
    ["resource_kind"],
)
LEASES_LOST = Counter(
    "fence_leases_lost",
    "Leases that became LOST while held, by reason: refused (Redis refused an extend: "
    "taken over or broken), ttl_passed (the TTL surely passed by the holder's clock), "
    "marked (the holder marked it lost). A release is not a loss.",
    ["resource_kind", "reason"],
)
RECEIVER_CALLS = Counter(
    "fence_receiver_calls",
    "Fenced calls a receiver (locking's receive_call) decided, by receiver and verdict: "
    "accepted, replaced, replayed, stale (409), conflict (422), unverified (401), declined.",
    ["receiver", "verdict"],
)

# The final outcomes that have a counter of their own (committed and already_done are
# read from the histogram's _count series).
_OUTCOME_COUNTERS = {
    Outcome.BUSY: BUSY,
    Outcome.STALE: STALE_REJECTIONS,
    Outcome.FAILED: EXTERNAL_CALL_FAILURES,
    Outcome.UNAVAILABLE: UNAVAILABLE,
    Outcome.CONFLICT: CONFLICTS,
}


def _label(operation: str) -> str:
    return operation or UNNAMED_OPERATION


def lease_granted(operation: str) -> None:
    """Count one granted lease."""
    ACQUISITIONS.labels(_label(operation)).inc()


def counter_reseeded(operation: str) -> None:
    """Count one fence counter raised from the database."""
    RESEEDS.labels(_label(operation)).inc()


def attempt_finished(operation: str, outcome: Outcome, seconds: float) -> None:
    """Count an attempt's final outcome and observe how long it took."""
    counter = _OUTCOME_COUNTERS.get(outcome)
    if counter is not None:
        counter.labels(_label(operation)).inc()
    DURATION.labels(_label(operation), outcome).observe(seconds)


def receiver_call(receiver: str, verdict: str) -> None:
    """Count one call a receiver decided."""
    RECEIVER_CALLS.labels(receiver, verdict).inc()


def stale_write_refused(operation: str, refused_by: RefusedBy) -> None:
    """Count one write refused as stale, by the fence or by the receiver."""
    STALE_WRITES_REFUSED.labels(_label(operation), refused_by).inc()


def epochs_started(resource: str, cause: EpochCause, count: int = 1) -> None:
    """Count ``count`` new fence epochs of resources of ``resource``'s kind."""
    EPOCHS_STARTED.labels(resource_kind(resource), cause).inc(count)


def lease_overran(resource: str, seconds: float) -> None:
    """Observe how long the work under a lease on ``resource`` ran past its TTL."""
    LEASE_OVERRUN.labels(resource_kind(resource)).observe(seconds)


def lease_uncertain(resource: str) -> None:
    """Count a lease that became uncertain."""
    LEASES_UNCERTAIN.labels(resource_kind(resource)).inc()


def lease_lost(resource: str, reason: LossCause) -> None:
    """Count a lease that became lost."""
    LEASES_LOST.labels(resource_kind(resource), reason).inc()
