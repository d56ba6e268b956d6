"""Honest lease states through a real partition: HELD, UNCERTAIN (it may still run), LOST.

The holder reaches Redis through a ``PartitionProxy`` (locking/tests/support.py) and a
client with a short socket timeout; the test's own client, and any rival holder, reach
Redis directly, so they see what the partitioned holder cannot: whether its lease still
runs. Timings are real: a keep-alive renews every ttl/3, and a partition shows as a
renewal that times out.
"""

import asyncio
import time
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
import redis
import redis.asyncio
from django.db import transaction
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from locking import (
    FenceLock,
    LeaseLost,
    LeaseState,
    LeaseUncertain,
    Outcome,
    advance_fence,
    run_fenced,
)
from locking.asyncio import AsyncFenceLock
from locking.audit import Attempt
from locking.conf import setting
from locking.keys import lock_key
from locking.models import FenceEvent
from locking.tests.support import PartitionProxy, async_wait_until, run_async, wait_until
from locking.tests.testapp.models import FencedThing

pytestmark = pytest.mark.django_db

RESOURCE = "fenced-thing:partitioned"
SOCKET_TIMEOUT = 0.5  # seconds: the partitioned holder's Redis socket timeout
# Room for a busy machine on top of what the guarantee promises; well below every TTL here,
# so a holder that only noticed at the TTL would fail the bounds below.
SLACK = 1.0
WAIT = 15  # seconds: upper bound for every wait in this module


@pytest.fixture
def proxy():
    parts = urlsplit(setting("LOCK_REDIS_URL"))
    proxy = PartitionProxy(parts.port or 6379, target_host=parts.hostname or "127.0.0.1")
    yield proxy
    proxy.stop()


def db_number() -> int:
    return int(urlsplit(setting("LOCK_REDIS_URL")).path.lstrip("/") or 0)


@pytest.fixture
def partitioned_lock(proxy) -> FenceLock:
    """A lock whose Redis is behind the proxy, with a short timeout and no retries."""
    client = redis.Redis(
        port=proxy.port,
        db=db_number(),
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        retry=Retry(NoBackoff(), 0),
    )
    return FenceLock(client=client)


@pytest.fixture
def async_partitioned_lock(proxy) -> AsyncFenceLock:
    """The same for async code: a ``redis.asyncio`` client through the proxy (its
    connections are opened on first use, by the event loop that uses them)."""
    return AsyncFenceLock(async_client_through(proxy))


def async_client_through(proxy: PartitionProxy) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(
        port=proxy.port,
        db=db_number(),
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        retry=AsyncRetry(NoBackoff(), 0),
    )


def state_becomes(lease, state: LeaseState, *, within: float) -> float:
    """Wait until ``lease.state`` is ``state``; return how long it took."""
    started = time.monotonic()
    wait_until(lambda: lease.state is state, what=f"the lease to be {state}", timeout=within)
    return time.monotonic() - started


# --- keep_alive through a partition ------------------------------------------------------


def test_keep_alive_reports_uncertain_within_an_interval_and_a_timeout_then_holds_again(
    partitioned_lock, proxy, redis_client
):
    ttl = timedelta(seconds=6)  # renewals every 2 s; UNCERTAIN in at most 2.5 s
    lease = partitioned_lock.acquire(RESOURCE, ttl=ttl)
    losses: list = []
    lease.on_lost(losses.append)

    with lease.keep_alive():
        assert lease.state is LeaseState.HELD
        proxy.partition()
        took = state_becomes(lease, LeaseState.UNCERTAIN, within=WAIT)

        assert took <= ttl.total_seconds() / 3 + SOCKET_TIMEOUT + SLACK
        assert redis_client.pttl(lock_key(RESOURCE)) > 0  # it does still run: not lost
        with pytest.raises(LeaseUncertain) as caught:
            lease.check()  # nothing may go out while the holder cannot know
        assert isinstance(caught.value, LeaseLost)
        assert caught.value.outcome == Outcome.LOST
        assert caught.value.reason.startswith("extend failed: ")
        assert str(caught.value).startswith(f"lease on {RESOURCE} (token 1) is uncertain: ")
        assert not lease.lost.is_set() and losses == []

        proxy.heal()
        state_becomes(lease, LeaseState.HELD, within=ttl.total_seconds())
        lease.check()  # held again: the work may go on
        assert redis_client.pttl(lock_key(RESOURCE)) > 3000  # renewed after the partition

    assert losses == []
    assert lease.release() is True


def test_a_partition_longer_than_the_ttl_is_lost_when_the_ttl_surely_passed_and_told_once(
    partitioned_lock, proxy, redis_client
):
    ttl = timedelta(seconds=3)
    lease = partitioned_lock.acquire(RESOURCE, ttl=ttl)
    losses: list = []
    lease.on_lost(losses.append)

    renewal = lease.keep_alive()
    with renewal:
        proxy.partition()
        started = time.monotonic()
        state_becomes(lease, LeaseState.UNCERTAIN, within=WAIT)
        assert losses == []
        # The keep-alive reports the loss itself, at the TTL: no one polls the state here.
        assert lease.lost.wait(WAIT)
        lost_after = time.monotonic() - started
        assert redis_client.exists(lock_key(RESOURCE)) == 0  # "surely": Redis expired it
        wait_until(lambda: not renewal._thread.is_alive(), what="the keep-alive to stop")

    assert lost_after <= ttl.total_seconds() + SLACK
    assert losses == [lease]
    assert lease.state is LeaseState.LOST
    assert lease.lost.reason.startswith("its TTL passed by this process's clock (extend failed")
    with pytest.raises(LeaseLost) as caught:
        lease.check()
    assert type(caught.value) is LeaseLost  # lost, not merely uncertain

    rival = FenceLock().acquire(RESOURCE, ttl=timedelta(seconds=30), holder="rival")
    proxy.heal()
    assert rival.token == lease.token + 1
    assert lease.extend(ttl) is False  # LOST is final: nothing is sent
    assert lease.state is LeaseState.LOST and losses == [lease]
    assert rival.release() is True  # the lost holder never touched it


# --- extend by hand ----------------------------------------------------------------------


def test_an_extend_that_cannot_reach_redis_is_uncertain_and_the_next_that_can_holds_it(
    partitioned_lock, proxy, redis_client
):
    lease = partitioned_lock.acquire(RESOURCE, ttl=timedelta(seconds=30))
    losses: list = []
    lease.on_lost(losses.append)

    proxy.partition()
    assert lease.extend(timedelta(seconds=30)) is False
    assert lease.state is LeaseState.UNCERTAIN
    assert not lease.probably_valid
    assert not lease.lost.is_set()

    proxy.heal()
    assert lease.extend(timedelta(seconds=45)) is True
    assert lease.state is LeaseState.HELD
    lease.check()
    assert 30_000 < redis_client.pttl(lock_key(RESOURCE)) <= 45_000
    assert losses == []


def test_after_the_partition_redis_naming_another_owner_makes_an_uncertain_lease_lost(
    partitioned_lock, proxy, redis_client
):
    lease = partitioned_lock.acquire(RESOURCE, ttl=timedelta(seconds=30))
    losses: list = []
    lease.on_lost(losses.append)
    proxy.partition()
    assert lease.extend(timedelta(seconds=30)) is False
    assert lease.state is LeaseState.UNCERTAIN

    redis_client.delete(lock_key(RESOURCE))  # broken or expired while the holder was cut off
    rival = FenceLock().acquire(RESOURCE, ttl=timedelta(seconds=30), holder="rival")
    proxy.heal()

    assert lease.extend(timedelta(seconds=30)) is False
    assert lease.state is LeaseState.LOST
    assert lease.lost.reason == "extend refused: the lease expired or has another holder"
    assert losses == [lease]
    assert rival.release() is True


def test_a_lease_whose_ttl_ran_out_by_this_process_clock_is_lost(fence_lock, redis_client):
    lease = fence_lock.acquire(RESOURCE, ttl=timedelta(milliseconds=200))
    assert lease.state is LeaseState.HELD
    time.sleep(0.25)

    assert lease.state is LeaseState.LOST
    assert lease.lost.reason == "its TTL passed by this process's clock"


# --- what an uncertain lease stops --------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_run_fenced_stops_an_uncertain_lease_before_the_external_call_and_records_lost(
    partitioned_lock, proxy
):
    thing = FencedThing.objects.create(name="before")
    resource = f"fenced-thing:{thing.pk}"
    external_calls: list[int] = []

    def work(lease) -> None:
        with lease.keep_alive(timedelta(seconds=3)):
            proxy.partition()
            wait_until(lambda: lease.state is LeaseState.UNCERTAIN, what="doubt", timeout=WAIT)
            lease.check()
            external_calls.append(lease.token)
            with transaction.atomic():
                advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
                FencedThing.objects.filter(pk=thing.pk).update(name="after")

    with pytest.raises(LeaseUncertain):
        run_fenced(
            resource, work, ttl=timedelta(seconds=3), attempt=Attempt("alice"),
            lock=partitioned_lock,
        )  # fmt: skip

    assert external_calls == []
    [(outcome, token, detail)] = FenceEvent.objects.values_list("outcome", "token", "detail")
    assert (outcome, token) == (Outcome.LOST, 1)
    assert detail.startswith(f"lease on {resource} (token 1) is uncertain: extend failed: ")
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("before", 0)


# --- the async keep-alive -----------------------------------------------------------------


def test_async_keep_alive_rides_out_a_short_partition_without_cancelling_its_block(
    async_partitioned_lock, proxy
):
    ttl = timedelta(seconds=6)
    seen: list[LeaseState] = []

    async def scenario():
        lease = await async_partitioned_lock.acquire(RESOURCE, ttl=ttl)
        async with lease.keep_alive(cancel=True):
            proxy.partition()
            started = time.monotonic()
            await async_wait_until(
                lambda: lease.state is LeaseState.UNCERTAIN, what="doubt", timeout=WAIT
            )
            seen.append(lease.state)
            took = time.monotonic() - started
            assert took <= ttl.total_seconds() / 3 + SOCKET_TIMEOUT + SLACK
            proxy.heal()  # a few socket closes: quick enough for the loop
            await async_wait_until(
                lambda: lease.state is LeaseState.HELD, what="held", timeout=ttl.total_seconds()
            )
            seen.append(lease.state)
        lost_after_the_block = lease.lost.is_set()
        released = await lease.release()
        await async_partitioned_lock.client.aclose()
        return "the block ran to its end", lost_after_the_block, released

    assert run_async(scenario) == ("the block ran to its end", False, True)
    assert seen == [LeaseState.UNCERTAIN, LeaseState.HELD]


def test_async_keep_alive_cancels_its_block_only_once_the_partition_outlasts_the_ttl(
    async_partitioned_lock, proxy, redis_client
):
    ttl = timedelta(seconds=3)
    states: list[LeaseState] = []

    async def scenario() -> None:
        lease = await async_partitioned_lock.acquire(RESOURCE, ttl=ttl)
        try:
            async with lease.keep_alive(cancel=True):
                proxy.partition()
                while True:  # the block's work, looking at its lease now and then
                    states.append(lease.state)
                    await asyncio.sleep(0.05)
        finally:
            await async_partitioned_lock.client.aclose()

    with pytest.raises(LeaseLost) as caught:
        run_async(scenario)

    assert type(caught.value) is LeaseLost
    assert caught.value.reason.startswith("its TTL passed by this process's clock (extend")
    assert LeaseState.UNCERTAIN in states  # it went on while only uncertain
    assert states.index(LeaseState.UNCERTAIN) > 0 and states[0] is LeaseState.HELD
    assert redis_client.exists(lock_key(RESOURCE)) == 0
