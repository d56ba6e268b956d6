"""A TTL is a ``timedelta`` wherever one is taken: anything else is a ``TypeError`` that
says so, raised before Redis or the audit is touched (it used to be ``AttributeError:
'int' object has no attribute 'total_seconds'`` from deep inside, issue 36)."""

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync

from locking import LeasedAttempt, LeaseState, run_fenced
from locking.asyncio import AsyncFenceLock, arun_fenced
from locking.audit import Attempt
from locking.keys import fence_key, lock_key
from locking.models import FenceEvent

# Every grant may record a fence epoch in the database (locking/epochs.py).
pytestmark = pytest.mark.django_db

RESOURCE = "ttl-type:thing:1"
LONG = timedelta(seconds=30)
MESSAGE = "ttl must be a datetime.timedelta, e.g. timedelta(seconds=5)"
# What a caller might pass instead: seconds as a number or a string, or nothing.
NOT_TIMEDELTAS = [5, 2.5, "5", None]
ATTEMPT = Attempt(actor="alice", operation="ttl-type")


def nothing_granted(redis_client) -> bool:
    return redis_client.exists(lock_key(RESOURCE), fence_key(RESOURCE)) == 0


@pytest.mark.parametrize("ttl", NOT_TIMEDELTAS)
def test_both_locks_refuse_a_ttl_that_is_not_a_timedelta(fence_lock, redis_client, ttl):
    with pytest.raises(TypeError) as sync_error:
        fence_lock.acquire(RESOURCE, ttl=ttl)
    with pytest.raises(TypeError) as async_error:
        async_to_sync(AsyncFenceLock().acquire)(RESOURCE, ttl=ttl)

    assert str(sync_error.value) == str(async_error.value) == MESSAGE
    assert nothing_granted(redis_client)


@pytest.mark.django_db(transaction=True)  # they refuse to run inside a test's transaction
@pytest.mark.parametrize("ttl", NOT_TIMEDELTAS)
def test_run_fenced_arun_fenced_and_leased_attempt_refuse_it_before_the_grant_and_the_audit(
    fence_lock, redis_client, ttl
):
    def work(lease):
        raise AssertionError("no work without a lease")

    async def awork(lease):
        raise AssertionError("no work without a lease")

    with pytest.raises(TypeError) as run_error:
        run_fenced(RESOURCE, work, ttl=ttl, attempt=ATTEMPT)
    with pytest.raises(TypeError) as arun_error:
        async_to_sync(arun_fenced)(RESOURCE, awork, ttl=ttl, attempt=ATTEMPT)
    with pytest.raises(TypeError) as leased_error:
        LeasedAttempt(RESOURCE, ttl=ttl, attempt=ATTEMPT)

    assert {str(run_error.value), str(arun_error.value), str(leased_error.value)} == {MESSAGE}
    assert nothing_granted(redis_client)
    assert not FenceEvent.objects.exists()  # a caller's mistake, not an attempt's outcome


@pytest.mark.parametrize("ttl", [5, 2.5, "5"])
def test_extend_and_keep_alive_refuse_it_and_leave_the_lease_held(fence_lock, redis_client, ttl):
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)
    async_lease = async_to_sync(AsyncFenceLock().acquire)(f"{RESOURCE}:async", ttl=LONG)
    calls = {
        "extend": lambda: lease.extend(ttl),
        "keep_alive": lambda: lease.keep_alive(ttl),
        "async extend": lambda: async_to_sync(async_lease.extend)(ttl),
        "async keep_alive": lambda: async_lease.keep_alive(ttl),
    }
    messages = {}
    for name, call in calls.items():
        with pytest.raises(TypeError) as error:
            call()
        messages[name] = str(error.value)

    assert messages == dict.fromkeys(calls, MESSAGE)
    assert lease.state is async_lease.state is LeaseState.HELD
    assert lease.release() is True
    assert async_to_sync(async_lease.release)() is True
