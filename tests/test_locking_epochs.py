"""Fence safety across Redis data loss, for the locking app alone.

The promise: a grant made before Redis lost its counter never wins after a newer holder's
write, even when it was never written (the database cannot know its number) and even
after two losses in a row. Each test makes the grants, loses Redis (FLUSHALL, or a real
redis-server killed and started again without persistence), lets a newer holder write
through ``run_fenced``, and then lets the old grant try: ``advance_fence`` refuses it.

The paused holders are real threads with their own database connections, held at a hold
point until the test lets them write.
"""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

from hoa.models import Complaint
from locking import (
    Attempt,
    FenceLock,
    StaleFencingToken,
    advance_fence,
    epoch_of,
    lock_key,
    run_fenced,
)
from locking.epochs import current_epoch, first_token
from locking.models import FenceEvent
from tests.harness.processes import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)

RESOURCE = "vendor-assignment:complaint:epochs"
TTL = timedelta(seconds=30)
WRITER = Attempt(actor="newer", operation="epoch-test")
JOIN = 30  # seconds: upper bound for every thread


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Leaking roof")


def write(complaint: Complaint, title: str, lock: FenceLock | None = None) -> int:
    """Write ``title`` under a fresh lease through run_fenced; return the committed token."""
    tokens: list[int] = []

    def work(lease):
        tokens.append(lease.token)
        with transaction.atomic():
            advance_fence(Complaint.objects.filter(pk=complaint.pk), lease)
            Complaint.objects.filter(pk=complaint.pk).update(title=title)
        return lease.token

    token = run_fenced(RESOURCE, work, ttl=TTL, attempt=WRITER, lock=lock)
    # The first grant after a loss already outranks everything: no doomed attempt.
    assert tokens == [token]
    return token


def grant_then_expire(lock: FenceLock):
    """A grant whose holder then pauses past its lease: Redis forgets the lease."""
    lease = lock.acquire(RESOURCE, ttl=TTL)
    lock.client.pexpire(lock_key(RESOURCE), 0)
    return lease


class PausedHolder(threading.Thread):
    """Holds a grant at a hold point, then tries to write with it on its own connection."""

    def __init__(self, complaint: Complaint, lease):
        super().__init__(name=f"paused holder {lease.token}")
        self.complaint, self.lease = complaint, lease
        self.resume = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        try:
            assert self.resume.wait(JOIN)
            with transaction.atomic():
                advance_fence(Complaint.objects.filter(pk=self.complaint.pk), self.lease)
                Complaint.objects.filter(pk=self.complaint.pk).update(title="stale write")
        except BaseException as exc:  # the test reads it
            self.error = exc
        finally:
            connection.close()

    def wake(self) -> BaseException | None:
        self.resume.set()
        self.join(JOIN)
        assert not self.is_alive()
        return self.error


def title_and_token(complaint: Complaint) -> tuple[str, int]:
    complaint.refresh_from_db()
    return complaint.title, complaint.last_fence_token


def test_unwritten_grants_from_before_a_flushall_are_refused_after_a_newer_write(
    complaint, fence_lock, redis_client
):
    assert [write(complaint, "one"), write(complaint, "two")] == [1, 2]
    crashed = grant_then_expire(fence_lock)  # token 3: its holder crashed, never wrote
    paused = PausedHolder(complaint, grant_then_expire(fence_lock))  # token 4: paused
    paused.start()
    assert (crashed.token, paused.lease.token) == (3, 4)

    redis_client.flushall()  # Redis lost everything, the counter included
    newer = write(complaint, "newer")

    assert newer == first_token(1) + 1  # epoch 1 outranks every token of epoch 0
    error = paused.wake()
    assert isinstance(error, StaleFencingToken)
    assert (error.token, error.recorded) == (4, newer)
    with pytest.raises(StaleFencingToken), transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=complaint.pk), crashed)
    assert title_and_token(complaint) == ("newer", newer)


def test_unwritten_grants_from_before_a_redis_restart_without_persistence_are_refused(
    complaint,
):
    server = RedisServer().start()
    try:
        lock = FenceLock(client=server.client())
        assert [write(complaint, "one", lock), write(complaint, "two", lock)] == [1, 2]
        grant_then_expire(lock)  # token 3, never written
        paused = PausedHolder(complaint, grant_then_expire(lock))  # token 4
        paused.start()

        server.stop()  # no RDB, no AOF: the restart (same port) loses every key
        server.start()
        lock = FenceLock(client=server.client())
        assert lock.current_token(RESOURCE) == 0
        newer = write(complaint, "newer", lock)
    finally:
        server.destroy()

    assert newer == first_token(1) + 1
    error = paused.wake()
    assert isinstance(error, StaleFencingToken)
    assert title_and_token(complaint) == ("newer", newer)


def test_two_losses_in_a_row_never_reuse_an_epoch(complaint, fence_lock, redis_client):
    assert write(complaint, "one") == 1
    redis_client.flushall()
    # Grants of epoch 1, never written; the second one's holder is paused.
    first = grant_then_expire(fence_lock)
    paused = PausedHolder(complaint, grant_then_expire(fence_lock))
    paused.start()
    assert [epoch_of(first.token), epoch_of(paused.lease.token)] == [1, 1]
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == 1  # nothing recorded

    redis_client.flushall()  # the second loss: the database still only knows token 1
    newer = write(complaint, "newer")

    # An epoch derived from the recorded token (1 -> epoch 1) would be handed out twice;
    # the durable epoch moves on to 2.
    assert newer == first_token(2) + 1
    assert current_epoch(RESOURCE) == 2
    assert isinstance(paused.wake(), StaleFencingToken)
    assert title_and_token(complaint) == ("newer", newer)


def test_a_crowd_that_finds_the_counter_gone_records_one_epoch_and_all_of_it_commits(
    complaint, fence_lock, redis_client
):
    assert write(complaint, "one") == 1
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
                advance_fence(Complaint.objects.filter(pk=complaint.pk), lease)
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


def test_the_rejected_paused_grant_is_audited_as_stale_and_writes_nothing(
    complaint, fence_lock, redis_client
):
    assert write(complaint, "one") == 1
    paused_lease = grant_then_expire(fence_lock)
    redis_client.flushall()
    newer = write(complaint, "newer")

    def late(lease):
        with transaction.atomic():
            Complaint.objects.filter(pk=complaint.pk).update(title="stale write")
            advance_fence(Complaint.objects.filter(pk=complaint.pk), paused_lease)

    with pytest.raises(StaleFencingToken):
        run_fenced(RESOURCE, late, ttl=TTL, attempt=Attempt(actor="paused"))
    assert title_and_token(complaint) == ("newer", newer)
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
    complaint, fsync, stop
):
    aof = ("--appendonly", "yes", "--appendfsync", fsync)
    server = RedisServer(args=aof).start()
    try:
        lock = FenceLock(client=server.client())
        assert write(complaint, "one", lock) == 1
        grant_then_expire(lock)  # 2, never written
        paused = PausedHolder(complaint, grant_then_expire(lock))  # 3, paused
        paused.start()
        if stop == "shutdown":
            server.client().shutdown()  # redis-py swallows the closed connection
        else:
            server.process.kill()
        server.process.wait(JOIN)
        server.start()  # the same port and folder: the AOF is read back
        lock = FenceLock(client=server.client())
        assert lock.current_token(RESOURCE) == 3  # nothing lost
        newer = write(complaint, "newer", lock)
    finally:
        server.destroy()

    assert newer == 4  # no new epoch was needed
    assert isinstance(paused.wake(), StaleFencingToken)
    assert title_and_token(complaint) == ("newer", 4)
