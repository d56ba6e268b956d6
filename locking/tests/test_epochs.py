"""Fence safety across Redis data loss, for the locking app alone.

The promise: a grant made before Redis lost its counter never wins after a newer holder's
write, even when it was never written (the database cannot know its number) and even
after two losses in a row. Each test makes the grants, loses Redis (FLUSHALL, or a real
redis-server killed and started again without persistence), lets a newer holder write
through ``run_fenced``, and then lets the old grant try: ``advance_fence`` refuses it.

The paused holders are locking's test helpers (``paused_holder``, locking/testing.py): a
grant whose lease ran out in Redis, whose late write runs in a thread of its own with its
own database connection.
"""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

from locking import (
    FenceLock,
    LockUnavailable,
    StaleFencingToken,
    advance_fence,
    prepare_fences,
    run_fenced,
)
from locking.audit import Attempt
from locking.epochs import current_epoch, first_token
from locking.keys import epoch_of, fence_key
from locking.models import FenceEpoch, FenceEvent
from locking.testing import LeaseFactory
from locking.tests.support import PrivateRedis, free_port
from locking.tests.testapp.models import FencedThing

pytestmark = pytest.mark.django_db(transaction=True)

RESOURCE = "fenced-thing:epochs"
TTL = timedelta(seconds=30)
WRITER = Attempt(actor="newer", operation="epoch-test")
JOIN = 30  # seconds: upper bound for every thread


@pytest.fixture
def thing(db):
    return FencedThing.objects.create(name="Leaking roof")


def write(thing: FencedThing, name: str, lock: FenceLock | None = None) -> int:
    """Write ``name`` under a fresh lease through run_fenced; return the committed token."""
    tokens: list[int] = []

    def work(lease):
        tokens.append(lease.token)
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            FencedThing.objects.filter(pk=thing.pk).update(name=name)
        return lease.token

    token = run_fenced(RESOURCE, work, ttl=TTL, attempt=WRITER, lock=lock)
    # The first grant after a loss already outranks everything: no doomed attempt.
    assert tokens == [token]
    return token


def stale_write(thing: FencedThing):
    """A paused holder's late work: the fence, then the write, on the holder's connection."""

    def late(lease) -> None:
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            FencedThing.objects.filter(pk=thing.pk).update(name="stale write")

    return late


def name_and_token(thing: FencedThing) -> tuple[str, int]:
    thing.refresh_from_db()
    return thing.name, thing.last_fence_token


@pytest.mark.private_redis  # FLUSHALL
def test_unwritten_grants_from_before_a_flushall_are_refused_after_a_newer_write(
    thing, paused_holder, redis_client
):
    assert [write(thing, "one"), write(thing, "two")] == [1, 2]
    crashed = paused_holder(RESOURCE).lease  # token 3: its holder crashed, never wrote
    paused = paused_holder(RESOURCE)  # token 4: paused
    assert (crashed.token, paused.token) == (3, 4)

    redis_client.flushall()  # Redis lost everything, the counter included
    newer = write(thing, "newer")

    assert newer == first_token(1) + 1  # epoch 1 outranks every token of epoch 0
    with pytest.raises(StaleFencingToken) as refused:
        paused.resume(stale_write(thing))
    assert (refused.value.token, refused.value.recorded) == (4, newer)
    with pytest.raises(StaleFencingToken), transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), crashed)
    assert name_and_token(thing) == ("newer", newer)


def test_unwritten_grants_from_before_a_redis_restart_without_persistence_are_refused(
    thing, tmp_path
):
    port = free_port()
    server = PrivateRedis(tmp_path, port=port)
    try:
        lock = FenceLock(client=server.client(timeout=5))
        assert [write(thing, "one", lock), write(thing, "two", lock)] == [1, 2]
        grants = LeaseFactory(lock)
        grants.paused(RESOURCE)  # token 3, never written
        paused = grants.paused(RESOURCE)  # token 4

        server.stop()  # no RDB, no AOF: the restart loses every key
        server = PrivateRedis(tmp_path, port=port)
        lock = FenceLock(client=server.client(timeout=5))
        assert lock.current_token(RESOURCE) == 0
        newer = write(thing, "newer", lock)
    finally:
        server.stop()

    assert newer == first_token(1) + 1
    with pytest.raises(StaleFencingToken):
        paused.resume(stale_write(thing))
    assert name_and_token(thing) == ("newer", newer)


@pytest.mark.private_redis  # FLUSHALL
def test_two_losses_in_a_row_never_reuse_an_epoch(thing, paused_holder, redis_client):
    assert write(thing, "one") == 1
    redis_client.flushall()
    # Grants of epoch 1, never written; the second one's holder is paused.
    first = paused_holder(RESOURCE)
    paused = paused_holder(RESOURCE)
    assert [epoch_of(first.token), epoch_of(paused.token)] == [1, 1]
    assert FencedThing.objects.get(pk=thing.pk).last_fence_token == 1  # nothing recorded

    redis_client.flushall()  # the second loss: the database still only knows token 1
    newer = write(thing, "newer")

    # An epoch derived from the recorded token (1 -> epoch 1) would be handed out twice;
    # the durable epoch moves on to 2.
    assert newer == first_token(2) + 1
    assert current_epoch(RESOURCE) == 2
    with pytest.raises(StaleFencingToken):
        paused.resume(stale_write(thing))
    assert name_and_token(thing) == ("newer", newer)


@pytest.mark.private_redis  # FLUSHALL
def test_a_crowd_that_finds_the_counter_gone_records_one_epoch_and_all_of_it_commits(
    thing, fence_lock, redis_client
):
    assert write(thing, "one") == 1
    redis_client.flushall()
    crowd = 6
    barrier = threading.Barrier(crowd)
    tokens: list[int] = []
    errors: list[BaseException] = []

    def worker(number: int) -> None:
        try:
            barrier.wait(JOIN)
            lease = FenceLock().acquire(RESOURCE, ttl=TTL, wait=timedelta(seconds=JOIN))
            with lease, transaction.atomic():
                advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
                tokens.append(lease.token)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(crowd)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN)

    assert errors == []
    # One of the crowd recorded epoch 1; the others waited for its seed instead of
    # recording epochs of their own, so no grant was refused for its epoch.
    assert current_epoch(RESOURCE) == 1
    assert sorted(tokens) == [first_token(1) + n for n in range(1, crowd + 1)]


@pytest.mark.private_redis  # FLUSHALL
def test_the_rejected_paused_grant_is_audited_as_stale_and_writes_nothing(
    thing, paused_holder, redis_client
):
    assert write(thing, "one") == 1
    paused_lease = paused_holder(RESOURCE).lease
    redis_client.flushall()
    newer = write(thing, "newer")

    def late(lease):
        with transaction.atomic():
            FencedThing.objects.filter(pk=thing.pk).update(name="stale write")
            advance_fence(FencedThing.objects.filter(pk=thing.pk), paused_lease)

    with pytest.raises(StaleFencingToken):
        run_fenced(RESOURCE, late, ttl=TTL, attempt=Attempt(actor="paused"))
    assert name_and_token(thing) == ("newer", newer)
    stale = FenceEvent.objects.filter(resource=RESOURCE, outcome="stale").get()
    assert stale.token == paused_lease.token


@pytest.mark.parametrize(
    "fsync, stop",
    [
        ("everysec", "shutdown"),  # a clean restart: SHUTDOWN writes the AOF out
        ("always", "kill -9"),  # a crash: each grant was fsynced before its reply
    ],
)
def test_with_an_aof_the_counter_survives_and_an_unwritten_grant_stays_below(
    thing, fsync, stop, tmp_path
):
    aof = ("--appendonly", "yes", "--appendfsync", fsync)
    port = free_port()
    server = PrivateRedis(tmp_path, *aof, port=port)
    try:
        lock = FenceLock(client=server.client(timeout=5))
        assert write(thing, "one", lock) == 1
        grants = LeaseFactory(lock)
        grants.paused(RESOURCE)  # 2, never written
        paused = grants.paused(RESOURCE)  # 3, paused
        if stop == "shutdown":
            server.client(timeout=5).shutdown()  # redis-py swallows the closed connection
            server.process.wait(JOIN)
        else:
            server.process.kill()
            server.process.wait(JOIN)
        server = PrivateRedis(tmp_path, *aof, port=port)
        lock = FenceLock(client=server.client(timeout=5))
        assert lock.current_token(RESOURCE) == 3  # nothing lost
        newer = write(thing, "newer", lock)
    finally:
        server.stop()

    assert newer == 4  # no new epoch was needed
    with pytest.raises(StaleFencingToken):
        paused.resume(stale_write(thing))
    assert name_and_token(thing) == ("newer", 4)


# -- prepare_fences: a batch's first epochs in one commit -----------------------------

BATCH = [f"fenced-thing:batch:{n}" for n in range(5)]


def test_prepare_records_the_first_epochs_of_a_batch_in_one_statement_and_grants_skip_theirs(
    fence_lock, django_assert_num_queries
):
    with django_assert_num_queries(1):  # one INSERT … ON CONFLICT DO NOTHING, autocommit
        assert prepare_fences(BATCH) == len(BATCH)

    assert [current_epoch(resource) for resource in BATCH] == [0] * len(BATCH)
    with django_assert_num_queries(0):  # no grant records an epoch of its own
        tokens = [fence_lock.acquire(resource, ttl=TTL).token for resource in BATCH]
    assert tokens == [1] * len(BATCH)


@pytest.mark.private_redis  # FLUSHALL
def test_prepare_leaves_a_resource_with_history_to_its_grant_after_a_loss(
    thing, paused_holder, redis_client
):
    assert [write(thing, "one"), write(thing, "two")] == [1, 2]
    paused = paused_holder(RESOURCE)  # token 3, never written
    redis_client.flushall()

    # Epoch 0 was handed out already: seeding it again would give token 3 to someone else.
    assert prepare_fences([RESOURCE, *BATCH]) == len(BATCH)
    assert not redis_client.exists(fence_key(RESOURCE))  # still missing: its grant decides
    newer = write(thing, "newer")

    assert newer == first_token(1) + 1
    with pytest.raises(StaleFencingToken):
        paused.resume(stale_write(thing))
    assert name_and_token(thing) == ("newer", newer)


def test_prepare_never_lowers_a_counter_and_never_repeats_itself(fence_lock, redis_client):
    redis_client.set(fence_key(BATCH[0]), 41)  # a counter from before epochs existed
    assert prepare_fences(BATCH) == len(BATCH)
    assert fence_lock.acquire(BATCH[0], ttl=TTL).token == 42

    # Prepared again (a second host, a rerun): nothing new, nothing raised or lowered.
    assert prepare_fences(BATCH) == 0
    assert fence_lock.acquire(BATCH[1], ttl=TTL).token == 1
    assert [current_epoch(resource) for resource in BATCH] == [0] * len(BATCH)


def test_prepare_inside_a_transaction_that_rolls_back_keeps_its_epochs(fence_lock):
    # The counters are seeded as soon as prepare returns, so the epochs they start must
    # not go with the caller's rollback: they are written on a connection of their own.
    with pytest.raises(RuntimeError), transaction.atomic():
        assert prepare_fences(BATCH) == len(BATCH)
        raise RuntimeError("the caller's work failed")

    assert FenceEpoch.objects.filter(resource__in=BATCH, epoch=0).count() == len(BATCH)
    assert prepare_fences(BATCH) == 0


def test_prepare_with_redis_down_is_unavailable_and_the_grant_still_starts_a_new_epoch(
    fence_lock, tmp_path
):
    port = free_port()
    server = PrivateRedis(tmp_path, port=port)
    lock = FenceLock(client=server.client(timeout=1))
    server.stop()
    with pytest.raises(LockUnavailable):
        prepare_fences(BATCH, lock=lock)
    # The epochs are recorded but never seeded: the first grant finds no counter and moves
    # on to epoch 1 rather than reuse 0, whose tokens nobody was given.
    assert fence_lock.acquire(BATCH[0], ttl=TTL).token == first_token(1) + 1
