"""The fence lock on a real Redis: grants, refusals, release/extend, waiting, keep-alive.

Most tests use the lock Redis of the test settings (``LOCK_REDIS_URL``, flushed per test).
Tests that count the commands a call sends, or stop Redis under a live lease, use a
private ``redis-server`` started on a free port for this module, so other test runs on the
shared server cannot disturb the counts.
"""

import os
import socket
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
from redis.crc import key_slot

from locking import FenceLock, LeaseState, LockHeld, LockUnavailable
from locking.keys import fence_key, holder_label, lock_key, new_owner, validate_resource
from locking.models import FenceEpoch
from locking.operators import holders
from locking.tests.support import PrivateRedis, free_port, wait_until

# Every grant may record a fence epoch in the database (locking/epochs.py).
pytestmark = pytest.mark.django_db

RESOURCE = "monthly-charges:org:1:2025-01"
LONG = timedelta(seconds=30)
WAIT = 10  # seconds: upper bound for every wait in this module


def wait_for(predicate, what: str) -> None:
    wait_until(predicate, what=what, timeout=WAIT)


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory):
    server = PrivateRedis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def private_lock(private_redis):
    client = private_redis.client()
    client.flushdb()
    return FenceLock(client=client)


def unreachable_lock(port: int) -> FenceLock:
    """A FenceLock whose client points at ``port`` with a short timeout and no retries."""
    client = redis.Redis.from_url(
        f"redis://127.0.0.1:{port}/0", socket_timeout=0.2, socket_connect_timeout=0.2
    )
    return FenceLock(client=client)


# --- grants and refusals ----------------------------------------------------------------


def test_acquire_grants_a_lease_with_token_owner_and_expiry(fence_lock, redis_client):
    before = datetime.now(tz=UTC)
    lease = fence_lock.acquire(RESOURCE, ttl=LONG, holder="alice")

    assert lease.resource == RESOURCE
    assert lease.token == 1
    assert len(lease.owner) == 32 and int(lease.owner, 16) >= 0
    assert before < lease.expires_at <= before + LONG + timedelta(seconds=1)
    stored = redis_client.get(lock_key(RESOURCE)).decode()
    assert stored.startswith(lease.owner + "|")
    assert stored.endswith("|" + holder_label("alice"))
    assert 0 < redis_client.pttl(lock_key(RESOURCE)) <= 30_000
    assert int(redis_client.get(fence_key(RESOURCE))) == 1
    assert lease.probably_valid


# Python 3.12+ warns on any fork() of a process with threads (the suite's clients have
# some); this child only writes three ids to a pipe and leaves with os._exit.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_owner_ids_never_repeat_in_a_process_nor_in_a_forked_child():
    # Owner ids are a random per-process prefix and a counter (no random bytes per grant):
    # a forked child (a gunicorn worker, a month-start worker) must draw its own prefix.
    ours = [new_owner() for _ in range(1000)]
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its ids and leave without running anything else
        os.write(writer, " ".join(new_owner() for _ in range(3)).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        childs = pipe.read().split()
    os.waitpid(pid, 0)

    assert len(set(ours)) == len(ours)
    assert all(len(owner) == 32 and int(owner, 16) >= 0 for owner in ours + childs)
    assert len(childs) == 3 and not set(childs) & set(ours)
    assert {owner[:16] for owner in childs} != {ours[0][:16]}


def test_busy_answer_names_the_holder_and_when_to_retry(fence_lock, redis_client):
    held = fence_lock.acquire(RESOURCE, ttl=LONG, holder="alice")
    stored = redis_client.get(lock_key(RESOURCE))

    with pytest.raises(LockHeld) as caught:
        FenceLock().acquire(RESOURCE, ttl=LONG, holder="bob")

    busy = caught.value
    assert busy.resource == RESOURCE
    assert "alice" in busy.holder
    assert f"pid {os.getpid()}" in busy.holder
    assert timedelta(0) < busy.retry_after <= LONG
    assert busy.token == held.token
    assert busy.acquired_at is not None
    assert "alice" in str(busy)
    # The refusal wrote nothing: same lock value, counter not advanced.
    assert redis_client.get(lock_key(RESOURCE)) == stored
    assert int(redis_client.get(fence_key(RESOURCE))) == held.token


def test_release_deletes_our_lease_once_and_keeps_the_counter(fence_lock, redis_client):
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)

    assert lease.release() is True
    assert redis_client.exists(lock_key(RESOURCE)) == 0
    assert lease.release() is False
    assert not lease.probably_valid
    assert int(redis_client.get(fence_key(RESOURCE))) == 1
    assert redis_client.pttl(fence_key(RESOURCE)) == -1  # the counter never expires


def test_context_manager_releases_on_exit_even_when_the_block_raises(fence_lock, redis_client):
    with fence_lock.acquire(RESOURCE, ttl=LONG) as lease:
        assert redis_client.exists(lock_key(RESOURCE)) == 1
    assert lease.lost.is_set()
    assert redis_client.exists(lock_key(RESOURCE)) == 0

    with pytest.raises(RuntimeError), fence_lock.acquire(RESOURCE, ttl=LONG):
        raise RuntimeError("work failed")
    assert redis_client.exists(lock_key(RESOURCE)) == 0


def test_extend_resets_the_expiry_of_our_lease(fence_lock, redis_client):
    lease = fence_lock.acquire(RESOURCE, ttl=timedelta(seconds=2))

    assert lease.extend(LONG) is True
    assert redis_client.pttl(lock_key(RESOURCE)) > 2_000
    assert lease.expires_at > datetime.now(tz=UTC) + timedelta(seconds=20)
    with pytest.raises(ValueError, match="positive"):
        lease.extend(timedelta(0))


def test_expired_lease_cannot_release_or_extend_the_new_holders_lock(fence_lock, redis_client):
    old = fence_lock.acquire(RESOURCE, ttl=timedelta(milliseconds=200))
    wait_for(lambda: not redis_client.exists(lock_key(RESOURCE)), "the short lease to expire")
    new = fence_lock.acquire(RESOURCE, ttl=LONG, holder="new holder")
    new_value = redis_client.get(lock_key(RESOURCE))

    assert old.extend(LONG) is False
    assert old.release() is False

    assert old.lost.is_set()
    assert redis_client.get(lock_key(RESOURCE)) == new_value
    assert redis_client.pttl(lock_key(RESOURCE)) > 25_000  # not re-timed by the old holder
    assert new.release() is True


def test_tokens_strictly_increase_across_release_expiry_and_takeover(fence_lock, redis_client):
    tokens = []
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)
    tokens.append(lease.token)
    lease.release()  # after a release
    lease = fence_lock.acquire(RESOURCE, ttl=timedelta(milliseconds=200))
    tokens.append(lease.token)
    wait_for(lambda: not redis_client.exists(lock_key(RESOURCE)), "natural expiry")
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)  # after a natural expiry
    tokens.append(lease.token)
    redis_client.pexpire(lock_key(RESOURCE), 0)
    lease = FenceLock().acquire(RESOURCE, ttl=LONG)  # another client takes over
    tokens.append(lease.token)

    assert tokens == [1, 2, 3, 4]
    assert fence_lock.current_token(RESOURCE) == 4
    assert fence_lock.current_token("never-granted") == 0


def test_each_resource_has_its_own_counter(fence_lock):
    first = fence_lock.acquire("vendor-assignment:complaint:1", ttl=LONG)
    second = fence_lock.acquire("vendor-assignment:complaint:2", ttl=LONG)
    assert (first.token, second.token) == (1, 1)


def test_lock_and_counter_keys_share_one_cluster_slot():
    assert lock_key(RESOURCE) == "lock:{" + RESOURCE + "}"
    assert fence_key(RESOURCE) == "fence:{" + RESOURCE + "}"
    assert key_slot(lock_key(RESOURCE).encode()) == key_slot(fence_key(RESOURCE).encode())


def test_holder_label_names_who_host_and_pid_on_one_line():
    label = holder_label("generate_monthly_charges\n(cron)")
    assert label == f"generate_monthly_charges (cron) on {socket.gethostname()} pid {os.getpid()}"
    assert holder_label("x" * 500) == "x" * 200
    assert holder_label() == f"{socket.gethostname()} pid {os.getpid()}"


# --- resource names ---------------------------------------------------------------------

BAD_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("r" * 201, id="201-characters"),
    pytest.param("has space", id="space"),
    pytest.param("tab\there", id="tab"),
    pytest.param("new\nline", id="newline"),
    pytest.param("nul\x00byte", id="control-character"),
    pytest.param("open{brace", id="open-brace"),
    pytest.param("close}brace", id="close-brace"),
    pytest.param(42, id="not-a-string"),
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_resource_name_raises_before_any_redis_command(name, private_redis, private_lock):
    client = private_lock.client
    before = private_redis.commands_processed(client)

    with pytest.raises(ValueError):
        private_lock.acquire(name, ttl=LONG)
    with pytest.raises(ValueError):
        private_lock.reseed(name, 10)
    with pytest.raises(ValueError):
        private_lock.current_token(name)

    # The only command between the two INFO replies is the first INFO itself.
    assert private_redis.commands_processed(client) == before + 1
    assert client.dbsize() == 0


def test_command_count_sees_a_valid_acquire(private_redis, private_lock):
    """Control for the test above: the counter does move when a command is sent."""
    client = private_lock.client
    # The first grant of a resource loads the script and records its epoch 0.
    private_lock.acquire(RESOURCE, ttl=LONG).release()
    before = private_redis.commands_processed(client)
    scripts_before = private_redis.calls(client, "evalsha")

    private_lock.acquire(RESOURCE, ttl=LONG)

    # Redis counts the commands a script runs (TIME, SET, INCR) as processed too.
    assert private_redis.commands_processed(client) > before + 1
    assert private_redis.calls(client, "evalsha") == scripts_before + 1  # one round trip


def test_a_redis_that_forgot_the_scripts_loads_them_again_and_grants(private_redis, private_lock):
    # Grant and release call EVALSHA themselves (locking.scripts.run_script); a Redis that
    # forgot the scripts (restarted, SCRIPT FLUSH) answers NOSCRIPT: load, run again.
    client = private_lock.client
    private_lock.acquire(RESOURCE, ttl=LONG).release()
    client.script_flush()
    loads = private_redis.calls(client, "script|load")

    lease = private_lock.acquire(RESOURCE, ttl=LONG)
    assert client.exists(lock_key(RESOURCE)) == 1
    assert lease.release() is True

    assert client.exists(lock_key(RESOURCE)) == 0
    assert private_redis.calls(client, "script|load") == loads + 2  # grant's, release's
    evalshas = private_redis.calls(client, "evalsha")
    private_lock.acquire(RESOURCE, ttl=LONG).release()
    assert private_redis.calls(client, "evalsha") == evalshas + 2  # loaded: one each
    assert private_redis.calls(client, "script|load") == loads + 2


def test_a_resources_first_grant_records_epoch_0_and_then_grants_token_1(
    private_redis, private_lock
):
    client = private_lock.client
    private_lock.acquire(RESOURCE, ttl=LONG).release()  # loads the script
    scripts_before = private_redis.calls(client, "evalsha")

    lease = private_lock.acquire("another-resource", ttl=LONG)

    # One script call finds no counter; the epoch is recorded; one more call grants.
    assert private_redis.calls(client, "evalsha") == scripts_before + 2
    assert lease.token == 1
    assert FenceEpoch.objects.get(resource="another-resource").epoch == 0


def test_non_positive_ttl_raises_before_any_redis_command(private_redis, private_lock):
    before = private_redis.commands_processed(private_lock.client)
    with pytest.raises(ValueError, match="ttl must be positive"):
        private_lock.acquire(RESOURCE, ttl=timedelta(0))
    assert private_redis.commands_processed(private_lock.client) == before + 1


def test_longest_allowed_name_and_unicode_are_accepted(fence_lock):
    assert validate_resource("r" * 200) == "r" * 200
    assert fence_lock.acquire("r" * 200, ttl=LONG).token == 1
    assert fence_lock.acquire("vendor-assignment:complaint:é", ttl=LONG).token == 1


# --- Redis down -------------------------------------------------------------------------


def test_refused_connection_raises_lock_unavailable_and_writes_nothing(redis_client):
    lock = unreachable_lock(free_port())

    with pytest.raises(LockUnavailable) as caught:
        lock.acquire(RESOURCE, ttl=LONG)

    assert caught.value.resource == RESOURCE
    assert "refused" in caught.value.reason.lower()
    with pytest.raises(LockUnavailable):
        lock.current_token(RESOURCE)
    with pytest.raises(LockUnavailable):
        lock.reseed(RESOURCE, 5)
    assert redis_client.dbsize() == 0


def test_redis_that_never_answers_raises_lock_unavailable_after_the_socket_timeout(
    redis_client,
):
    with socket.socket() as silent:  # accepts connections (backlog) but never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        lock = unreachable_lock(silent.getsockname()[1])

        with pytest.raises(LockUnavailable) as caught:
            lock.acquire(RESOURCE, ttl=LONG)

    assert "timeout" in caught.value.reason.lower() or "timed out" in caught.value.reason.lower()
    assert redis_client.dbsize() == 0


def test_lease_outlives_a_redis_that_stopped_and_reports_it_cannot_release(tmp_path):
    server = PrivateRedis(tmp_path)
    try:
        lock = FenceLock(client=server.client(timeout=0.2))
        lease = lock.acquire(RESOURCE, ttl=LONG)
        server.stop()

        assert lease.extend(LONG) is False
        assert lease.state is LeaseState.UNCERTAIN  # no answer: it may still run
        assert not lease.lost.is_set()
        assert lease.release() is False  # logged, never raised
        assert lease.state is LeaseState.RELEASED  # its holder is done with it
        with pytest.raises(LockUnavailable):
            lock.acquire(RESOURCE, ttl=LONG)
    finally:
        server.stop()


# --- waiting ----------------------------------------------------------------------------


def test_without_wait_a_busy_resource_is_answered_after_one_attempt(private_redis, private_lock):
    private_lock.acquire(RESOURCE, ttl=LONG)
    before = private_redis.calls(private_lock.client, "evalsha")

    with pytest.raises(LockHeld):
        private_lock.acquire(RESOURCE, ttl=LONG)

    assert private_redis.calls(private_lock.client, "evalsha") == before + 1


def test_wait_retries_while_held_and_succeeds_after_release(private_redis, private_lock):
    holder = private_lock.acquire(RESOURCE, ttl=LONG)
    before = private_redis.calls(private_lock.client, "evalsha")
    outcome: dict = {}
    start = threading.Barrier(2)

    def waiter():
        start.wait(WAIT)
        try:
            outcome["lease"] = private_lock.acquire(
                RESOURCE, ttl=LONG, wait=timedelta(seconds=WAIT)
            )
        except LockHeld as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=waiter)
    thread.start()
    start.wait(WAIT)
    # Proof that the waiter is retrying against the held lock, not yet granted.
    wait_for(
        lambda: private_redis.calls(private_lock.client, "evalsha") >= before + 3,
        "the waiter to retry",
    )
    assert "lease" not in outcome
    assert holder.release() is True
    thread.join(WAIT)

    assert "error" not in outcome
    assert outcome["lease"].token == holder.token + 1


def test_wait_gives_up_at_the_deadline_with_lock_held(private_redis, private_lock):
    private_lock.acquire(RESOURCE, ttl=LONG, holder="alice")
    before = private_redis.calls(private_lock.client, "evalsha")

    with pytest.raises(LockHeld) as caught:
        private_lock.acquire(RESOURCE, ttl=LONG, wait=timedelta(milliseconds=300))

    assert "alice" in caught.value.holder
    assert private_redis.calls(private_lock.client, "evalsha") > before + 1


def test_wait_succeeds_when_the_holders_lease_expires(fence_lock):
    first = fence_lock.acquire(RESOURCE, ttl=timedelta(milliseconds=300))
    second = fence_lock.acquire(RESOURCE, ttl=LONG, wait=timedelta(seconds=WAIT))
    assert second.token == first.token + 1
    assert first.release() is False


# --- keep_alive -------------------------------------------------------------------------


def test_keep_alive_holds_a_short_lease_well_past_its_ttl(fence_lock, redis_client):
    lease = fence_lock.acquire(RESOURCE, ttl=timedelta(milliseconds=500))
    with lease.keep_alive() as kept:
        time.sleep(1.6)  # more than three TTLs
        assert kept is lease
        assert redis_client.get(lock_key(RESOURCE)).decode().startswith(lease.owner)
    assert not lease.lost.is_set()
    assert lease.release() is True


def test_keep_alive_stops_and_marks_the_lease_lost_once_it_is_taken_over(fence_lock, redis_client):
    lease = fence_lock.acquire(RESOURCE, ttl=timedelta(milliseconds=300))
    renewal = lease.keep_alive()
    with renewal:
        redis_client.pexpire(lock_key(RESOURCE), 0)  # the lease expires (e.g. a long pause)
        newer = FenceLock().acquire(RESOURCE, ttl=LONG, holder="newer")
        wait_for(lambda: lease.lost.is_set(), "keep-alive to notice the takeover")
        wait_for(lambda: not renewal._thread.is_alive(), "keep-alive to stop")
        assert not lease.probably_valid

    assert redis_client.pttl(lock_key(RESOURCE)) > 25_000  # never re-timed to 300 ms
    assert lease.release() is False
    assert newer.release() is True


def test_keep_alive_renews_to_the_granted_ttl_not_the_time_left(fence_lock):
    lease = fence_lock.acquire(RESOURCE, ttl=LONG)
    assert lease.keep_alive().ttl == LONG
    lease.extend(timedelta(seconds=45))
    assert lease.keep_alive().ttl == timedelta(seconds=45)
    assert lease.keep_alive(timedelta(seconds=2)).ttl == timedelta(seconds=2)


# --- the counter and the operators' view ------------------------------------------------


def test_reseed_raises_the_counter_but_never_lowers_it(fence_lock, redis_client):
    assert fence_lock.reseed(RESOURCE, 10) == 10
    assert fence_lock.reseed(RESOURCE, 5) == 10
    assert fence_lock.current_token(RESOURCE) == 10
    assert redis_client.pttl(fence_key(RESOURCE)) == -1
    assert fence_lock.acquire(RESOURCE, ttl=LONG).token == 11


def test_holders_lists_current_leases_with_label_and_token(fence_lock):
    fence_lock.acquire("vendor-assignment:complaint:7", ttl=LONG, holder="alice")
    fence_lock.acquire("monthly-charges:org:3:2025-02", ttl=LONG, holder="cron")
    released = fence_lock.acquire("monthly-charges:org:4:2025-02", ttl=LONG)
    released.release()

    infos = holders()

    assert [info.resource for info in infos] == [
        "monthly-charges:org:3:2025-02",
        "vendor-assignment:complaint:7",
    ]
    assert infos[1].label == holder_label("alice")
    assert infos[1].token == 1
    assert timedelta(seconds=25) < infos[1].ttl_left <= LONG
    only_vendors = holders(prefix="vendor-assignment:")
    assert [info.resource for info in only_vendors] == ["vendor-assignment:complaint:7"]


def test_holders_prefix_matches_literally_not_as_a_glob(fence_lock):
    fence_lock.acquire("job[1]", ttl=LONG)
    fence_lock.acquire("job1", ttl=LONG)
    fence_lock.acquire("job?x", ttl=LONG)

    assert [info.resource for info in holders(prefix="job[")] == ["job[1]"]
    assert [info.resource for info in holders(prefix="job?")] == ["job?x"]
