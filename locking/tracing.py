"""OpenTelemetry spans of a fenced attempt: grant, external call, fenced commit, release.

Only the OpenTelemetry API: without an SDK every span is a no-op, and the lock's hot path
skips it (``no_provider``). Attributes are ``locking.*``: the ``resource_kind``, never the
resource name (it may carry tenant and row ids), the token, the outcome, the operation,
whether a release found the lease ours. The documentation's 'Operating it' page, "Tracing".
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

from locking.keys import resource_kind
from locking.outcomes import Outcome

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
