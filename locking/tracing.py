"""What a fenced attempt tells an operator: OpenTelemetry spans and Prometheus metrics.

Spans (grant, external call, fenced commit, release): only the OpenTelemetry API, so without
an SDK every span is a no-op, and the lock's hot path skips it (``no_provider``). Attributes
are ``locking.*``: the ``resource_kind``, never the resource name (it may carry tenant and row
ids), the token, the outcome, the operation, whether a release found the lease ours.

Metrics: attempts are counted where every one passes (``run_fenced``), by operation and
outcome; the safety of leases and epochs where it happens, by ``resource_kind`` (the name up
to its first ``:``); a receiver's decisions by receiver and verdict. A resource name is never
a label. Every span, name and label: the documentation's 'Operating it' page.
"""

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Protocol

from opentelemetry import trace
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
from opentelemetry.trace import (
    INVALID_SPAN,
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    Status,
    StatusCode,
)
from prometheus_client import Counter, Histogram

from locking.keys import resource_kind
from locking.outcomes import EpochCause, LossCause, Outcome, RefusedBy

__all__ = ["span"]

TRACER_NAME = "locking"

RESOURCE_KIND = "locking.resource_kind"
FENCE_TOKEN = "locking.token"  # noqa: S105 - an attribute name, not a secret
OUTCOME = "locking.outcome"
OPERATION = "locking.operation"
RELEASED = "locking.released"

# Outcomes that mean the attempt went wrong; the others (busy, already done, a conflict, a
# refusal of the actor) are answers, not errors, and leave the span's status unset.
ERROR_OUTCOMES = frozenset(
    {Outcome.STALE, Outcome.FAILED, Outcome.UNAVAILABLE, Outcome.LOST, Outcome.UNKNOWN}
)


def set_outcome(current: Span, outcome: Outcome) -> None:
    current.set_attribute(OUTCOME, str(outcome))
    if outcome in ERROR_OUTCOMES:
        current.set_status(Status(StatusCode.ERROR, str(outcome)))


_UNKNOWN = object()
# A provider named in the environment is loaded by the API's first lookup (the long way).
_PROVIDER_IN_ENVIRONMENT = OTEL_PYTHON_TRACER_PROVIDER in os.environ
_provider_set = False  # once the API has a real provider it keeps it (set only once)


def no_provider() -> bool:
    """Whether no tracer provider is set: every span would be a no-op. The lock's hot path
    asks first and skips the span's context manager altogether."""
    # The API's own default until an SDK (or a test) sets a provider: every span a no-op.
    # A provider can be set only once, so a real one seen is remembered (one global read
    # per span on the lock's hot path instead of the API's lookup).
    global _provider_set
    if _provider_set:
        return False
    if getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None and not _PROVIDER_IN_ENVIRONMENT:
        # What get_tracer_provider() itself reads first, without its environment lookup
        # (two per lock cycle, a few per cent of it); any other answer takes the long way.
        return True
    provider = trace.get_tracer_provider()
    if isinstance(provider, ProxyTracerProvider | NoOpTracerProvider):
        return True
    _provider_set = True
    return False


def operation_span(
    name: str,
    resource: str | None,
    *,
    token: int | None = None,
    operation: str = "",
    attributes: Mapping[str, object] | None = None,
) -> AbstractContextManager[Span]:
    """A span of one step; an exception that declares its ``outcome`` sets the outcome."""
    if no_provider():
        return _NO_SPAN
    return _recording_span(name, resource, token, operation, attributes)


# Reusable and reentrant: what every step gets while no provider is set.
_NO_SPAN = nullcontext(INVALID_SPAN)


@contextmanager
def _recording_span(
    name: str,
    resource: str | None,
    token: int | None,
    operation: str,
    attributes: Mapping[str, object] | None,
) -> Iterator[Span]:
    initial = dict(attributes or {})
    if resource:
        initial[RESOURCE_KIND] = resource_kind(resource)
    if token is not None:
        initial[FENCE_TOKEN] = int(token)
    if operation:
        initial[OPERATION] = operation
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        name, attributes=initial, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except Exception as exc:  # recorded on the span, always re-raised
            current.record_exception(exc)
            outcome = getattr(exc, "outcome", None)
            if isinstance(outcome, Outcome):
                set_outcome(current, outcome)
            else:
                current.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise


class _Held(Protocol):
    """What ``span`` reads of a lease (``Lease`` or ``AsyncLease``)."""

    @property
    def resource(self) -> str: ...

    @property
    def token(self) -> int: ...


@contextmanager
def span(
    name: str,
    *,
    lease: _Held | None = None,
    resource: str | None = None,
    attributes: Mapping[str, object] | None = None,
) -> Iterator[Span]:
    """Trace one step of the work done under a lease, e.g. its external call::

        with locking.tracing.span("external-call", lease=lease, attributes={"endpoint": "billing"}):
            response = post_billing(..., fence_token=lease.token)

    The span gets the lease's resource kind and token (never the resource name). An
    exception is recorded on it; one that declares an ``Outcome`` sets ``locking.outcome``.
    Yields the OpenTelemetry span, for attributes the work learns on the way.
    """
    token = None
    if lease is not None:
        resource, token = lease.resource, lease.token
    with operation_span(name, resource, token=token, attributes=attributes) as current:
        yield current


# -- Prometheus metrics ---------------------------------------------------------------------

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
