"""Prometheus metrics of fenced attempts, labelled by operation and never by resource.

``run_fenced`` is the one place every fenced attempt passes through, so it is the one
place that counts: grants, and each attempt's final outcome with its duration. Labels are
the operation name the caller gives in ``Attempt.operation`` (a handful per project) and,
on the histogram, the outcome (a handful more). Resource names (one per organization and
month, one per complaint) would create a time series per resource and must never become a
label; the audit table (``FenceEvent``) and the logs carry them instead.

Under gunicorn with several workers every worker has its own counters; prometheus-client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, see docs/operations.md) adds them up.
"""

from prometheus_client import Counter, Histogram

from locking.outcomes import Outcome

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
