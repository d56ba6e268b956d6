"""OpenTelemetry spans of fenced attempts, read with the SDK's in-memory exporter.

The global tracer provider can be set once per process. This module sets an SDK provider
if none is set yet (or uses the SDK provider already set) and adds its own exporter; the
locking app looks its tracer up on every span, so it finds this provider whenever it was
set.
"""

import asyncio
from datetime import timedelta

import pytest
from django.db import transaction
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from locking import LockHeld, Outcome, StaleFencingToken, advance_fence, run_fenced
from locking.asyncio import aadvance_fence, arun_fenced
from locking.audit import Attempt
from locking.keys import lock_key
from locking.operators import break_lease
from locking.tests.support import run_async
from locking.tests.testapp.models import FencedThing
from locking.tracing import span

pytestmark = pytest.mark.django_db(transaction=True)

TTL = timedelta(seconds=30)
ALICE = Attempt(actor="alice", operation="rename", scope="org:1")


@pytest.fixture(scope="module")
def exporter():
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()  # the processor stays on the provider, but records nothing more


@pytest.fixture
def spans(exporter):
    """The exporter, emptied: what a test reads is what it caused."""
    exporter.clear()
    return exporter


def by_name(spans) -> dict:
    finished = spans.get_finished_spans()
    named = {s.name: s for s in finished}
    assert len(named) == len(finished), "a span name occurs twice: read the list instead"
    return named


@pytest.fixture
def thing():
    return FencedThing.objects.create(name="before")


@pytest.fixture
def resource(thing):
    # The tenant and row ids after the kind must never reach a span.
    return f"fenced-thing:org-77:{thing.pk}"


def rename(thing: FencedThing, name: str):
    def work(lease) -> int:
        with span("external-call", lease=lease, attributes={"endpoint": "billing"}):
            pass  # the billing call, carrying lease.token
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            FencedThing.objects.filter(pk=thing.pk).update(name=name)
        return lease.token

    return work


def attributes_hold_no_resource_name(finished: dict, resource: str) -> bool:
    values = [str(v) for s in finished.values() for v in s.attributes.values()]
    return not any("org-77" in value or resource in value for value in values)


def test_a_committed_attempt_is_one_trace_grant_call_fence_release(thing, resource, spans):
    run_fenced(resource, rename(thing, "after"), ttl=TTL, attempt=ALICE)

    finished = by_name(spans)
    assert set(finished) == {
        "locking.run_fenced",
        "locking.acquire",
        "external-call",
        "locking.fence",
        "locking.release",
    }
    root = finished["locking.run_fenced"]
    assert root.parent is None
    for name in ("locking.acquire", "external-call", "locking.fence", "locking.release"):
        assert finished[name].parent.span_id == root.context.span_id, name
        assert finished[name].context.trace_id == root.context.trace_id
        assert finished[name].attributes["locking.resource_kind"] == "fenced-thing"
    assert dict(root.attributes) == {
        "locking.resource_kind": "fenced-thing",
        "locking.operation": "rename",
        "locking.token": 1,
        "locking.outcome": "committed",
    }
    assert finished["locking.acquire"].attributes["locking.token"] == 1
    assert finished["external-call"].attributes["endpoint"] == "billing"
    assert finished["external-call"].attributes["locking.token"] == 1
    assert finished["locking.fence"].attributes["locking.token"] == 1
    assert finished["locking.release"].attributes["locking.released"] is True
    assert all(s.status.status_code is StatusCode.UNSET for s in finished.values())
    assert attributes_hold_no_resource_name(finished, resource)


def test_a_stale_commit_marks_the_fence_and_the_attempt_as_errors(
    thing, resource, fence_lock, spans
):
    def overtaken(lease) -> None:
        fence_lock.client.pexpire(lock_key(resource), 0)
        with fence_lock.acquire(resource, ttl=TTL) as newer, transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), newer)
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)

    with pytest.raises(StaleFencingToken):
        run_fenced(resource, overtaken, ttl=TTL, attempt=ALICE, lock=fence_lock)

    fences = [
        s
        for s in spans.get_finished_spans()
        if s.name == "locking.fence" and s.attributes["locking.token"] == 1
    ]
    [stale_fence] = fences
    assert stale_fence.attributes["locking.outcome"] == "stale"
    assert stale_fence.status.status_code is StatusCode.ERROR
    assert [e.name for e in stale_fence.events] == ["exception"]
    [root] = [s for s in spans.get_finished_spans() if s.name == "locking.run_fenced"]
    assert root.attributes["locking.outcome"] == "stale"
    assert root.status.status_code is StatusCode.ERROR


def test_a_busy_answer_is_an_outcome_not_an_error(thing, resource, fence_lock, spans):
    held = fence_lock.acquire(resource, ttl=TTL)
    spans.clear()

    with pytest.raises(LockHeld):
        run_fenced(resource, rename(thing, "x"), ttl=TTL, attempt=ALICE)

    finished = by_name(spans)
    assert set(finished) == {"locking.run_fenced", "locking.acquire"}
    for name in finished:
        assert finished[name].attributes["locking.outcome"] == "busy"
        assert finished[name].status.status_code is StatusCode.UNSET
    held.release()


def test_a_failed_external_call_is_recorded_on_its_span(resource, spans):
    class BillingDown(Exception):
        outcome = Outcome.FAILED

    def work(lease):
        with span("external-call", lease=lease):
            raise BillingDown("billing answered 503")

    with pytest.raises(BillingDown):
        run_fenced(resource, work, ttl=TTL, attempt=ALICE)

    call = by_name(spans)["external-call"]
    assert call.attributes["locking.outcome"] == "failed"
    assert call.status.status_code is StatusCode.ERROR
    [event] = call.events
    assert event.attributes["exception.message"] == "billing answered 503"


def test_the_async_attempt_nests_its_fenced_commit_under_the_attempt(thing, resource, spans):
    async def work(lease):
        with span("external-call", lease=lease):
            await asyncio.sleep(0)
        return await aadvance_fence(
            FencedThing.objects.filter(pk=thing.pk),
            lease,
            lambda: FencedThing.objects.filter(pk=thing.pk).update(name="after"),
        )

    run_async(lambda: arun_fenced(resource, work, ttl=TTL, attempt=ALICE))

    finished = by_name(spans)
    root = finished["locking.run_fenced"]
    commit = finished["locking.fenced_commit"]
    assert commit.parent.span_id == root.context.span_id  # across sync_to_async
    assert finished["locking.fence"].parent.span_id == commit.context.span_id
    for name in ("locking.acquire", "external-call", "locking.release"):
        assert finished[name].parent.span_id == root.context.span_id, name
    assert root.attributes["locking.outcome"] == "committed"
    assert commit.attributes["locking.token"] == 1
    assert attributes_hold_no_resource_name(finished, resource)


def test_breaking_a_lease_is_a_span_with_the_broken_token(resource, fence_lock, spans):
    held = fence_lock.acquire(resource, ttl=TTL)
    spans.clear()

    break_lease(resource, token=held.token, by="oona", reason="stuck")

    broken = by_name(spans)["locking.break_lease"]
    assert dict(broken.attributes) == {
        "locking.resource_kind": "fenced-thing",
        "locking.outcome": "broken",
        "locking.token": held.token,
    }
