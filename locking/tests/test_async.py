"""The async API on a real Redis and PostgreSQL: grants, contention, epochs, ``arun_fenced``,
a paused holder, and the keep-alive that cancels its work.

Each test runs its coroutines with ``run_async`` (``async_to_sync``), as a sync caller
would; ``sync_to_async`` work comes back to the test's thread and its connection.
Interleavings are forced with ``asyncio.Event``: a holder "paused" past its TTL is a task
suspended at an event the test sets only after the newer holder committed.
"""

import asyncio
from datetime import timedelta

import pytest

from locking import LeaseLost, LockHeld, LockUnavailable, StaleFencingToken
from locking.asyncio import AsyncFenceLock, aadvance_fence, arun_fenced
from locking.audit import Attempt
from locking.connection import get_async_lock_redis
from locking.epochs import astart_epoch, current_epoch, first_token
from locking.keys import fence_key, holder_label, lock_key, seed_key
from locking.models import FenceEvent
from locking.tests.support import async_wait_until, closed_port, run_async
from locking.tests.testapp.models import FencedThing

# arun_fenced refuses to run inside atomic(), and the audit must outlive a rollback.
pytestmark = pytest.mark.django_db(transaction=True)

TTL = timedelta(seconds=30)
SHORT = timedelta(milliseconds=300)
WAIT = 10  # seconds: upper bound for every wait in this module
ALICE = Attempt(actor="alice", operation="rename", scope="org:1")


@pytest.fixture
def thing():
    return FencedThing.objects.create(name="before")


@pytest.fixture
def resource(thing):
    return f"fenced-thing:{thing.pk}"


def rename(thing: FencedThing, name: str):
    """The synchronous writes of a fenced commit."""
    return lambda: FencedThing.objects.filter(pk=thing.pk).update(name=name)


def fenced(thing: FencedThing):
    return FencedThing.objects.filter(pk=thing.pk)


def events(resource: str) -> list[tuple]:
    return list(
        FenceEvent.objects.for_resource(resource)
        .order_by("id")
        .values_list("outcome", "token", "detail")
    )


def evalsha_calls(client) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


# --- leases -------------------------------------------------------------------------------


def test_the_async_lock_grants_and_release_deletes_the_lease_once(async_fence_lock, redis_client):
    async def scenario():
        lease = await async_fence_lock.acquire("monthly-charges:org:1", ttl=TTL, holder="alice")
        stored = redis_client.get(lock_key(lease.resource)).decode()
        first = await lease.release()
        second = await lease.release()
        return lease, stored, first, second

    lease, stored, first, second = run_async(scenario)

    assert lease.token == 1
    assert stored.startswith(lease.owner + "|")
    assert stored.endswith("|" + holder_label("alice"))
    assert (first, second) == (True, False)
    assert lease.lost.is_set()
    assert redis_client.exists(lock_key(lease.resource)) == 0
    assert int(redis_client.get(fence_key(lease.resource))) == 1


def test_async_with_releases_the_lease_when_the_block_raises(async_fence_lock, redis_client):
    async def scenario():
        with pytest.raises(RuntimeError):
            async with await async_fence_lock.acquire("r:1", ttl=TTL):
                assert redis_client.exists(lock_key("r:1")) == 1
                raise RuntimeError("work failed")

    run_async(scenario)

    assert redis_client.exists(lock_key("r:1")) == 0


def test_async_extend_resets_the_expiry_and_is_refused_once_the_lease_is_not_ours(
    async_fence_lock, redis_client
):
    async def scenario():
        lease = await async_fence_lock.acquire("r:1", ttl=timedelta(seconds=2))
        extended = await lease.extend(TTL)
        pttl = redis_client.pttl(lock_key("r:1"))
        redis_client.delete(lock_key("r:1"))
        refused = await lease.extend(TTL)
        return lease, extended, pttl, refused

    lease, extended, pttl, refused = run_async(scenario)

    assert extended is True
    assert pttl > 2_000
    assert refused is False
    assert lease.lost.reason == "extend refused: the lease expired or has another holder"


def test_a_second_async_acquire_gets_lock_held_naming_the_holder(async_fence_lock, redis_client):
    async def scenario():
        return await asyncio.gather(
            async_fence_lock.acquire("r:1", ttl=TTL, holder="alice"),
            async_fence_lock.acquire("r:1", ttl=TTL, holder="bob"),
            return_exceptions=True,
        )

    results = run_async(scenario)

    [lease] = [r for r in results if not isinstance(r, Exception)]
    [busy] = [r for r in results if isinstance(r, Exception)]
    owner, _, winner = redis_client.get(lock_key("r:1")).decode().split("|", 2)
    assert owner == lease.owner
    assert winner in (holder_label("alice"), holder_label("bob"))
    assert isinstance(busy, LockHeld)
    assert busy.holder == winner  # the refusal names the one that won
    assert busy.token == lease.token == 1
    assert timedelta(0) < busy.retry_after <= TTL
    assert int(redis_client.get(fence_key("r:1"))) == 1  # the refusal took no token


@pytest.mark.private_redis  # counts EVALSHA in INFO
def test_async_acquire_with_wait_gets_the_lease_once_the_holder_releases(
    async_fence_lock, redis_client
):
    async def scenario():
        holder = await async_fence_lock.acquire("r:1", ttl=TTL)
        before = evalsha_calls(redis_client)
        waiter = asyncio.create_task(
            async_fence_lock.acquire("r:1", ttl=TTL, wait=timedelta(seconds=WAIT))
        )
        # Proof that the waiter is retrying against the held lease, not yet granted.
        await async_wait_until(
            lambda: evalsha_calls(redis_client) >= before + 3, what="the waiter to retry"
        )
        assert not waiter.done()
        await holder.release()
        return holder, await waiter

    holder, granted = run_async(scenario)

    assert granted.token == holder.token + 1


def test_unreachable_redis_is_lock_unavailable(redis_client):
    import redis.asyncio

    async def scenario():
        client = redis.asyncio.Redis.from_url(
            f"redis://127.0.0.1:{closed_port()}/0", socket_timeout=0.2, socket_connect_timeout=0.2
        )
        lock = AsyncFenceLock(client)
        try:
            with pytest.raises(LockUnavailable):
                await lock.acquire("r:1", ttl=TTL)
        finally:
            await client.aclose()

    run_async(scenario)


def test_the_loops_client_is_built_from_the_lock_settings_once_per_loop(settings):
    async def clients():
        return get_async_lock_redis(), get_async_lock_redis()

    first, same = run_async(clients)
    other, _ = run_async(clients)

    assert first is same
    assert other is not first  # a new loop, a new client: connections belong to their loop
    kwargs = first.connection_pool.connection_kwargs
    assert f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs['db']}" == settings.LOCK_REDIS_URL
    assert kwargs["socket_timeout"] == 2.0


# --- epochs -------------------------------------------------------------------------------


def test_a_lost_counter_starts_a_new_epoch_before_the_async_grant(
    fence_lock, async_fence_lock, redis_client
):
    fence_lock.acquire("r:1", ttl=TTL).release()  # epoch 0, token 1
    redis_client.flushdb()  # Redis lost everything

    lease = run_async(lambda: async_fence_lock.acquire("r:1", ttl=TTL))

    assert lease.token == first_token(1) + 1
    assert current_epoch("r:1") == 1
    assert redis_client.exists(seed_key("r:1")) == 0  # its seeding claim was dropped


@pytest.mark.private_redis  # counts EVALSHA in INFO
def test_an_async_grant_waits_for_another_callers_epoch_instead_of_recording_its_own(
    fence_lock, async_fence_lock, redis_client
):
    fence_lock.acquire("r:1", ttl=TTL).release()  # epoch 0, token 1
    redis_client.flushdb()
    redis_client.set(seed_key("r:1"), "another caller")  # it found the loss first

    async def scenario():
        before = evalsha_calls(redis_client)
        grant = asyncio.create_task(async_fence_lock.acquire("r:1", ttl=TTL))
        # The grant script answers "another caller is recording the epoch" (3): it polls.
        await async_wait_until(
            lambda: evalsha_calls(redis_client) >= before + 3, what="the grant to poll"
        )
        assert not grant.done()
        # The other caller records epoch 1 and seeds the counter with it.
        floor = await astart_epoch("r:1")
        await async_fence_lock.reseed("r:1", floor)
        redis_client.delete(seed_key("r:1"))
        return await grant

    lease = run_async(scenario)

    assert lease.token == first_token(1) + 1
    assert current_epoch("r:1") == 1  # one epoch for the crowd, not one each


# --- arun_fenced --------------------------------------------------------------------------


def test_arun_fenced_commits_records_the_audit_and_releases(thing, resource, redis_client):
    async def work(lease):
        await asyncio.sleep(0)  # the external call, with an async client
        await aadvance_fence(fenced(thing), lease, rename(thing, "after"))
        return lease.token

    token = run_async(lambda: arun_fenced(resource, work, ttl=TTL, attempt=ALICE))

    assert token == 1
    [event] = FenceEvent.objects.all()
    assert (event.resource, event.token, event.outcome, event.detail) == (
        resource,
        1,
        "committed",
        "",
    )
    assert (event.actor, event.operation, event.scope) == ("alice", "rename", "org:1")
    assert redis_client.exists(lock_key(resource)) == 0
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("after", 1)


def test_arun_fenced_records_busy_and_never_runs_the_work(
    thing, resource, fence_lock, redis_client
):
    held = fence_lock.acquire(resource, ttl=TTL, holder="bob")
    calls: list[int] = []

    async def work(lease):
        calls.append(lease.token)

    with pytest.raises(LockHeld):
        run_async(lambda: arun_fenced(resource, work, ttl=TTL, attempt=ALICE))

    assert calls == []
    [(outcome, token, detail)] = events(resource)
    assert (outcome, token) == ("busy", held.token)
    assert "bob" in detail
    assert held.release() is True


def test_arun_fenced_retries_once_when_the_counter_is_behind(thing, resource, redis_client):
    FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=40)
    redis_client.set(fence_key(resource), 3)
    calls: list[int] = []

    async def work(lease):
        calls.append(lease.token)
        await aadvance_fence(fenced(thing), lease, rename(thing, "retried"))
        return lease.token

    token = run_async(lambda: arun_fenced(resource, work, ttl=TTL, attempt=ALICE))

    assert calls == [4, first_token(1) + 1]
    assert token == first_token(1) + 1
    assert events(resource) == [
        (
            "stale",
            4,
            "Redis fence counter was behind the recorded token 40: new epoch started, retrying",
        ),
        ("committed", first_token(1) + 1, ""),
    ]


def test_a_write_that_raises_rolls_the_fence_back_with_it(thing, resource, async_fence_lock):
    def write():
        FencedThing.objects.filter(pk=thing.pk).update(name="half")
        raise ValueError("the write failed")

    async def scenario():
        async with await async_fence_lock.acquire(resource, ttl=TTL) as lease:
            with pytest.raises(ValueError):
                await aadvance_fence(fenced(thing), lease, write)

    run_async(scenario)

    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("before", 0)


def test_a_paused_async_holder_is_refused_after_a_newer_holder_committed(
    thing, resource, redis_client
):
    async def scenario():
        paused = asyncio.Event()
        wake = asyncio.Event()
        seen: list[int] = []

        async def slow_work(lease):
            seen.append(lease.token)
            paused.set()
            await wake.wait()  # suspended: a slow call, a stalled event loop
            await aadvance_fence(fenced(thing), lease, rename(thing, "stale"))

        first = asyncio.create_task(
            arun_fenced(resource, slow_work, ttl=SHORT, attempt=Attempt(actor="first"))
        )
        await paused.wait()
        # The first lease runs out while its holder is suspended.
        await async_wait_until(
            lambda: not redis_client.exists(lock_key(resource)), what="the first lease to expire"
        )
        lock = AsyncFenceLock()
        async with await lock.acquire(resource, ttl=TTL, holder="second") as second:
            await aadvance_fence(fenced(thing), second, rename(thing, "second"))
        wake.set()
        with pytest.raises(StaleFencingToken) as caught:
            await first
        return seen, second, caught.value

    seen, second, stale = run_async(scenario)

    assert seen == [1]  # a genuinely stale holder is not retried
    assert (stale.token, stale.recorded) == (1, 2)
    assert second.token == 2
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("second", 2)
    assert events(resource) == [("stale", 1, "a newer holder recorded token 2")]


# --- keep_alive --------------------------------------------------------------------------


def test_async_keep_alive_holds_a_short_lease_past_its_ttl(async_fence_lock, redis_client):
    async def scenario():
        lease = await async_fence_lock.acquire("r:1", ttl=SHORT)
        async with lease.keep_alive() as kept:
            assert kept is lease
            deadline = asyncio.get_running_loop().time() + 3 * SHORT.total_seconds()
            while asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            still_ours = redis_client.get(lock_key("r:1")).decode().startswith(lease.owner)
        return lease, still_ours, await lease.release()

    lease, still_ours, released = run_async(scenario)

    assert still_ours
    assert released is True
    assert lease.lost.reason == "released"


def test_async_keep_alive_cancels_the_work_when_the_lease_is_lost(async_fence_lock, redis_client):
    async def scenario():
        lease = await async_fence_lock.acquire("r:1", ttl=SHORT)
        lost_calls: list = []
        lease.on_lost(lost_calls.append)
        started = asyncio.Event()
        never = asyncio.Event()
        went_on: list[str] = []

        async def work():
            async with lease.keep_alive(cancel=True):
                started.set()
                await never.wait()  # a slow external call
                went_on.append("after the call")

        task = asyncio.create_task(work())
        await started.wait()
        redis_client.delete(lock_key("r:1"))  # broken or expired under the holder
        with pytest.raises(LeaseLost) as caught:
            await asyncio.wait_for(task, WAIT)
        return lease, lost_calls, went_on, caught.value

    lease, lost_calls, went_on, lost = run_async(scenario)

    assert went_on == []
    assert lost_calls == [lease]
    assert lost.reason == "extend refused: the lease expired or has another holder"
    assert isinstance(lost.__cause__, asyncio.CancelledError)


def test_async_keep_alive_without_cancel_only_marks_the_lease_lost(async_fence_lock, redis_client):
    async def scenario():
        lease = await async_fence_lock.acquire("r:1", ttl=SHORT)
        async with lease.keep_alive():
            redis_client.delete(lock_key("r:1"))
            await async_wait_until(lease.lost.is_set, what="the keep-alive to notice")
            with pytest.raises(LeaseLost):
                lease.check()
        return "the block ran to its end"

    assert run_async(scenario) == "the block ran to its end"


def test_a_cancellation_from_elsewhere_stays_a_cancellation(async_fence_lock, redis_client):
    async def scenario():
        lease = await async_fence_lock.acquire("r:1", ttl=TTL)
        started = asyncio.Event()

        async def work():
            async with lease.keep_alive(cancel=True):
                started.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(work())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return lease, await lease.release()

    lease, released = run_async(scenario)

    assert released is True  # not lost: the keep-alive stopped, the lease stayed ours
    assert lease.lost.reason == "released"


def test_arun_fenced_refuses_to_run_inside_atomic(thing, resource):
    from django.db import transaction
    from django.db.transaction import TransactionManagementError

    async def work(lease):
        raise AssertionError("never runs")

    with transaction.atomic(), pytest.raises(TransactionManagementError):
        run_async(lambda: arun_fenced(resource, work, ttl=TTL, attempt=ALICE))


def test_aadvance_fence_refuses_a_bare_token_and_writes_nothing(thing):
    """Issue 35, point 1, on the async side: a bare int carries no resource or epoch."""
    with pytest.raises(TypeError, match=r"aadvance_fence\(\) takes the lease"):
        run_async(lambda: aadvance_fence(fenced(thing), 7, rename(thing, "bare")))
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("before", 0)
