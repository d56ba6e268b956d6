"""The lease-lost signal on a real Redis: ``lease.lost``, ``on_lost``, ``check()``.

A loss is forced, never waited for by luck: the test deletes the lease key or lets another
owner take it, and the keep-alive's next extend (every ttl/3) is refused.
"""

import logging
import threading
from datetime import timedelta

import pytest
from django.db import transaction

from locking import FenceLock, LeaseLost, LeaseState, LockError, Outcome, advance_fence, run_fenced
from locking.audit import Attempt
from locking.keys import lock_key
from locking.models import FenceEvent
from locking.tests.support import wait_until
from locking.tests.testapp.models import FencedThing

pytestmark = pytest.mark.django_db

RESOURCE = "fenced-thing:lease-lost"
LONG = timedelta(seconds=30)
SHORT = timedelta(milliseconds=300)  # a keep-alive extends every 100 ms
WAIT = 10  # seconds: upper bound for every wait in this module


def recorder() -> tuple[list, threading.Event]:
    """An ``on_lost`` callback's calls, and an event set at its first call."""
    calls: list = []
    called = threading.Event()

    def callback(lease) -> None:
        calls.append(lease)
        called.set()

    return calls, called


def test_a_fresh_lease_is_not_lost_and_check_passes(fence_lock):
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)

    assert not lease.lost.is_set()
    assert not lease.lost  # bool() is is_set(), as the boolean it replaces
    lease.check()  # no exception
    assert lease.lost.wait(0) is False


def test_keep_alive_marks_the_lease_lost_when_its_key_is_deleted_and_calls_on_lost_once(
    fence_lock, redis_client
):
    lease = fence_lock.acquire(RESOURCE, ttl=SHORT)
    calls, called = recorder()
    lease.on_lost(calls.append)
    lease.on_lost(lambda lost: called.set())

    with lease.keep_alive():
        redis_client.delete(lock_key(RESOURCE))  # e.g. Redis evicted or lost it
        assert lease.lost.wait(WAIT), "keep-alive never noticed the deleted key"
        assert called.wait(WAIT)
        with pytest.raises(LeaseLost) as caught:
            lease.check()

    lost = caught.value
    assert isinstance(lost, LockError)
    assert (lost.resource, lost.token, lost.outcome) == (RESOURCE, lease.token, Outcome.LOST)
    assert lost.reason == "extend refused: the lease expired or has another holder"
    assert str(lost) == (
        f"lease on {RESOURCE} (token 1) is lost: "
        "extend refused: the lease expired or has another holder"
    )
    assert not lease.probably_valid
    # Once, however often the loss is noticed again.
    assert lease.extend(LONG) is False
    assert lease.release() is False
    assert calls == [lease]


def test_keep_alive_marks_the_lease_lost_once_another_owner_takes_it(fence_lock, redis_client):
    lease = fence_lock.acquire(RESOURCE, ttl=SHORT)
    calls, called = recorder()
    lease.on_lost(calls.append)
    lease.on_lost(lambda lost: called.set())

    with lease.keep_alive():
        redis_client.pexpire(lock_key(RESOURCE), 0)  # its lease ran out (a long pause)
        newer = FenceLock().acquire(RESOURCE, ttl=LONG, holder="newer")
        assert called.wait(WAIT), "on_lost was never called"

    assert calls == [lease]
    with pytest.raises(LeaseLost):
        lease.check()
    assert newer.token == lease.token + 1
    assert newer.release() is True  # the loser's keep-alive never touched it


def test_an_extend_that_redis_refuses_calls_on_lost_in_the_callers_thread(fence_lock, redis_client):
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)
    threads: list[str] = []
    lease.on_lost(lambda lost: threads.append(threading.current_thread().name))
    redis_client.delete(lock_key(RESOURCE))

    assert lease.extend(LONG) is False

    assert threads == [threading.current_thread().name]
    assert lease.lost.is_set()


def test_release_sets_the_lost_signal_but_is_not_reported_as_a_loss(fence_lock):
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)
    calls, _ = recorder()
    lease.on_lost(calls.append)

    assert lease.release() is True

    assert lease.lost.is_set()
    assert lease.lost.reason == "released"
    with pytest.raises(LeaseLost, match="is lost: released"):
        lease.check()
    assert lease.extend(LONG) is False  # not ours any more; still no loss to report
    lease.on_lost(calls.append)
    assert calls == []


def test_a_signal_first_asked_for_after_the_release_says_released(fence_lock):
    # The signal is made on first use: a lease nobody watched is RELEASED once released,
    # and its signal, made afterwards, tells the same as one made before.
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)
    assert lease.state is LeaseState.HELD
    assert lease.release() is True

    assert lease.state is LeaseState.RELEASED
    assert lease.lost.is_set() and lease.lost.wait(0)
    assert lease.lost.released
    assert lease.lost.reason == "released"
    calls, _ = recorder()
    lease.on_lost(calls.append)
    assert calls == []  # a release is not a loss


def test_a_released_lease_says_released_and_a_lost_one_stays_lost_once_released(
    fence_lock, redis_client
):
    """Issue 45, item 6: ``lease.state`` read ``lost`` after a normal release, the word of
    a lease taken away. Released, it is ``RELEASED``; lost first, it stays ``LOST``."""
    released = fence_lock.acquire(RESOURCE, ttl=LONG)
    with released.keep_alive(LONG):
        assert released.release() is True  # inside the block: the keep-alive stops quietly
    assert released.state is LeaseState.RELEASED and released.state.is_over
    with pytest.raises(LeaseLost, match="is lost: released"):
        released.check()

    lost = fence_lock.acquire(RESOURCE, ttl=LONG)
    redis_client.delete(lock_key(RESOURCE))
    assert lost.extend(LONG) is False and lost.state is LeaseState.LOST
    assert lost.release() is False
    assert lost.state is LeaseState.LOST and lost.lost.reason != "released"


def test_check_raises_once_the_ttl_passed_by_this_process_clock(fence_lock, redis_client):
    lease = fence_lock.acquire(RESOURCE, ttl=timedelta(milliseconds=100))
    calls, _ = recorder()
    lease.on_lost(calls.append)
    wait_until(lambda: lease.state is LeaseState.LOST, what="the local deadline", timeout=WAIT)

    with pytest.raises(LeaseLost) as caught:
        lease.check()

    assert caught.value.reason == "its TTL passed by this process's clock"
    assert calls == [lease]
    assert lease.lost.is_set()


def test_on_lost_registered_after_the_loss_is_called_at_once(fence_lock, redis_client):
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)
    redis_client.delete(lock_key(RESOURCE))
    lease.extend(LONG)
    calls, _ = recorder()

    returned = lease.on_lost(calls.append)

    assert returned == calls.append
    assert calls == [lease]


def test_a_failing_callback_is_logged_and_the_others_still_run(fence_lock, redis_client, caplog):
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)
    calls, _ = recorder()

    @lease.on_lost
    def broken(lost):
        raise RuntimeError("bug in a callback")

    lease.on_lost(calls.append)
    redis_client.delete(lock_key(RESOURCE))

    with caplog.at_level(logging.ERROR, logger="locking.lease"):
        assert lease.extend(LONG) is False

    assert calls == [lease]
    assert [r.getMessage() for r in caplog.records] == ["on_lost callback failed"]


def test_set_by_hand_is_a_loss_and_a_lost_lease_cannot_be_cleared(fence_lock):
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)
    calls, _ = recorder()
    lease.on_lost(calls.append)

    lease.lost.set()

    assert calls == [lease]
    assert lease.lost.reason == "marked lost by its holder"
    with pytest.raises(RuntimeError, match="stays lost"):
        lease.lost.clear()
    assert lease.lost.is_set()
    assert lease.release() is True  # the key itself was still ours


@pytest.mark.django_db(transaction=True)
def test_work_that_checks_its_lease_stops_before_the_external_call_and_records_lost(
    redis_client,
):
    thing = FencedThing.objects.create(name="before")
    resource = f"fenced-thing:{thing.pk}"
    external_calls: list[int] = []

    def work(lease) -> None:
        with lease.keep_alive(SHORT):
            redis_client.delete(lock_key(resource))  # an operator or Redis took it away
            assert lease.lost.wait(WAIT)
            lease.check()
            external_calls.append(lease.token)
            with transaction.atomic():
                advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
                FencedThing.objects.filter(pk=thing.pk).update(name="after")

    with pytest.raises(LeaseLost):
        run_fenced(resource, work, ttl=LONG, attempt=Attempt(actor="alice"))

    assert external_calls == []
    assert list(FenceEvent.objects.values_list("outcome", "token", "detail")) == [
        (
            "lost",
            1,
            f"lease on {resource} (token 1) is lost: "
            "extend refused: the lease expired or has another holder",
        )
    ]
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("before", 0)
