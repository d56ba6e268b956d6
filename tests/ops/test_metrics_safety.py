"""The metrics that measure safety, read from ``GET /metrics`` (issue 26 item 5): epochs
started by cause, how long work ran past its lease, leases that became uncertain or lost,
and stale writes refused by the fence and by the receiving service.

Each test uses a resource kind (the resource name up to its first ``:``) or an operation of
its own, so the process-wide counters give exact values. Faults are real: Redis flushed or
behind, a TCP proxy that refuses connections, a receiver that answers 409.
"""

import uuid
from datetime import timedelta

import pytest
import redis
from django.db import transaction
from redis.backoff import NoBackoff
from redis.retry import Retry

from hoa.integrations.webhooks import post_fenced
from hoa.models import Complaint, ComplaintEvent
from locking import (
    FenceLock,
    LeaseState,
    StaleFencingToken,
    advance_fence,
    prepare_fences,
    run_fenced,
)
from locking.audit import Attempt
from locking.epochs import EPOCH_SPAN, first_token
from locking.keys import fence_key, lock_key
from locking.receiving import StaleAtReceiver
from tests.harness.net import TcpProxy
from tests.harness.waiting import wait_until
from tests.races.test_topologies_metrics import scrape, value
from tests.topologies import Child

TTL = timedelta(seconds=30)
SHORT = timedelta(milliseconds=200)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kind() -> str:
    return f"safety-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Noisy pump")


def fenced_note(complaint):
    def work(lease):
        with transaction.atomic():
            advance_fence(Complaint.objects.filter(pk=complaint.pk), lease)
            ComplaintEvent.objects.create(complaint=complaint, kind="note", detail="fixed")
        return lease.token

    return work


def metrics(client) -> dict:
    status, samples, _body = scrape(client)
    assert status == 200
    return samples


def test_epochs_started_are_counted_by_cause(client, kind, complaint, fence_lock, redis_client):
    first = f"{kind}:1"
    fence_lock.acquire(first, ttl=TTL).release()  # its first grant: epoch 0
    redis_client.delete(fence_key(first))  # Redis loses the counter
    fence_lock.acquire(first, ttl=TTL).release()  # epoch 1
    prepare_fences([f"{kind}:2", f"{kind}:3", f"{kind}:4"])  # three first epochs at once
    behind = f"{kind}:behind"
    fence_lock.acquire(behind, ttl=TTL).release()  # epoch 0, token 1
    Complaint.objects.filter(pk=complaint.pk).update(last_fence_token=40)
    attempt = Attempt(actor="alice", operation=kind)
    assert run_fenced(behind, fenced_note(complaint), ttl=TTL, attempt=attempt) == (
        first_token(1) + 1
    )
    full = f"{kind}:full"
    fence_lock.acquire(full, ttl=TTL).release()
    redis_client.set(fence_key(full), EPOCH_SPAN - 1)  # the last sequence of epoch 0
    assert fence_lock.acquire(full, ttl=TTL).token == first_token(1) + 1

    samples = metrics(client)
    started = "fence_epochs_started_total"
    assert value(samples, started, resource_kind=kind, cause="first_grant") == 6
    assert value(samples, started, resource_kind=kind, cause="counter_lost") == 1
    assert value(samples, started, resource_kind=kind, cause="counter_behind") == 1
    assert value(samples, started, resource_kind=kind, cause="sequence_exhausted") == 1
    # The refusal that showed the counter behind was a stale write refused by the fence.
    refused = "fence_stale_writes_refused_total"
    assert value(samples, refused, operation=kind, refused_by="fence") == 1


def test_work_that_ran_past_its_lease_is_observed_once_at_release(
    client, kind, fence_lock, redis_client
):
    overran = fence_lock.acquire(f"{kind}:1", ttl=SHORT)
    in_time = fence_lock.acquire(f"{kind}:2", ttl=TTL)
    # The holder is paused past its TTL: Redis expires the lease first.
    wait_until(lambda: not redis_client.exists(lock_key(overran.resource)), what="expiry")
    # Redis counts the TTL from when it ran the grant, the holder from when the reply
    # arrived (later, on a busy machine): the holder's own clock says LOST a moment after.
    wait_until(lambda: overran.state is LeaseState.LOST, what="the TTL to surely pass", timeout=5)
    past = overran.state

    assert overran.release() is False
    assert overran.release() is False  # a second release observes nothing more
    assert in_time.release() is True

    samples = metrics(client)
    histogram = "fence_lease_overrun_seconds"
    assert past is LeaseState.LOST
    assert value(samples, f"{histogram}_count", resource_kind=kind) == 1
    assert value(samples, f"{histogram}_sum", resource_kind=kind) > 0
    # Not in the smallest bucket's way of counting: it ran past, and the histogram says so.
    assert value(samples, f"{histogram}_bucket", resource_kind=kind, le="+Inf") == 1
    lost = "fence_leases_lost_total"
    assert value(samples, lost, resource_kind=kind, reason="ttl_passed") == 1


def test_leases_that_became_uncertain_or_lost_are_counted_by_reason(
    client, kind, fence_lock, redis_client
):
    proxy = TcpProxy(redis_client.connection_pool.connection_kwargs["port"], name="redis")
    proxy.start()
    try:
        proxied = redis.Redis(
            host="127.0.0.1",
            port=proxy.port,
            db=redis_client.connection_pool.connection_kwargs.get("db", 0),
            socket_timeout=1,
            socket_connect_timeout=1,
            retry=Retry(NoBackoff(), 0),
        )
        lease = FenceLock(client=proxied).acquire(f"{kind}:1", ttl=TTL)
        proxy.set_mode("refuse")  # a partition: renewals get no answer
        assert lease.extend(TTL) is False
        assert lease.extend(TTL) is False  # the same spell of doubt
        uncertain = lease.state
        proxy.heal()
        assert lease.extend(TTL) is True  # held again
        redis_client.delete(lock_key(lease.resource))  # broken: the lease is not ours any more
        assert lease.extend(TTL) is False
        refused = lease.state
    finally:
        proxy.stop()
    marked = fence_lock.acquire(f"{kind}:2", ttl=TTL)
    marked.lost.set()
    marked.lost.set()  # once
    marked.release()

    samples = metrics(client)
    assert uncertain is LeaseState.UNCERTAIN and refused is LeaseState.LOST
    assert value(samples, "fence_leases_uncertain_total", resource_kind=kind) == 1
    lost = "fence_leases_lost_total"
    assert value(samples, lost, resource_kind=kind, reason="refused") == 1
    assert value(samples, lost, resource_kind=kind, reason="marked") == 1
    assert value(samples, lost, resource_kind=kind, reason="ttl_passed") == 0


def test_stale_writes_refused_by_the_fence_and_by_the_receiver_are_counted_apart(
    client, kind, complaint, fence_lock, http_stub
):
    resource = f"{kind}:{complaint.pk}"
    attempt = Attempt(actor="alice", operation=kind)
    key = f"{kind}:{complaint.pk}:billing"
    receiver = ("fence_receiver_calls_total", {"receiver": "billing"})
    before = metrics(client)
    billing = http_stub.url_for("billing")

    def overtaken(call_first: bool):
        """This holder pauses past its lease; a newer one calls (and commits) first."""

        def work(lease):
            fence_lock.client.delete(lock_key(resource))
            with fence_lock.acquire(resource, ttl=TTL) as newer:
                post_fenced(billing, {"n": 1}, idempotency_key=key, token=newer, endpoint="billing")
                with transaction.atomic():
                    advance_fence(Complaint.objects.filter(pk=complaint.pk), newer)
            if call_first:
                post_fenced(billing, {"n": 1}, idempotency_key=key, token=lease, endpoint="billing")
            return fenced_note(complaint)(lease)

        return work

    with pytest.raises(StaleAtReceiver):  # its call arrives after the newer holder's
        run_fenced(resource, overtaken(call_first=True), ttl=TTL, attempt=attempt)
    with pytest.raises(StaleFencingToken) as fenced:  # no call: the fence refuses its write
        run_fenced(resource, overtaken(call_first=False), ttl=TTL, attempt=attempt)
    assert not isinstance(fenced.value, StaleAtReceiver)

    after = metrics(client)
    refused = "fence_stale_writes_refused_total"
    assert value(after, refused, operation=kind, refused_by="receiver") == 1
    assert value(after, refused, operation=kind, refused_by="fence") == 1
    name, labels = receiver
    for verdict, expected in (("accepted", 1), ("replaced", 1), ("stale", 1)):
        grown = value(after, name, **labels, verdict=verdict) - value(
            before, name, **labels, verdict=verdict
        )
        assert grown == expected, verdict
    assert value(after, "fence_stale_rejections_total", operation=kind) == 2


@pytest.mark.slow
def test_the_safety_counters_of_every_worker_process_add_up(
    client, settings, subprocess_env, kind, operation_label, tmp_path
):
    env = {**subprocess_env, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    workers = [Child("busy", f"{kind}:{n}", operation_label, env=env) for n in range(2)]
    try:
        for worker in workers:
            assert worker.expect("granted") == "granted"  # each a resource's first grant
            assert worker.finish() == 0
    finally:
        for worker in workers:
            worker.stop()

    settings.PROMETHEUS_MULTIPROC_DIR = str(tmp_path)
    samples = metrics(client)
    started = "fence_epochs_started_total"
    assert value(samples, started, resource_kind=kind, cause="first_grant") == 2


@pytest.fixture
def operation_label() -> str:
    return f"safety-op-{uuid.uuid4().hex[:8]}"
