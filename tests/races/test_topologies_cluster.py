"""The fence lock on a real Redis Cluster: 3 masters without replicas for this module, and,
for the failover tests, 3 masters with a replica each (with ``appendfsync always``, so a
node can crash and come back from its own disk).

Each script touches ``lock:{r}`` and ``fence:{r}``; the ``{r}`` hash tag puts both in one
slot, which is what lets a single EVALSHA run on whichever master owns it. With
``LOCK_REDIS_MIN_REPLICAS`` the grant and its ``WAIT`` go in one plain pipeline on the own
client of the node that owns the slot, so a grant its replica did not confirm is never
used, and a shard failover cannot hand a token out twice.
"""

import shutil
import time
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster
from redis.crc import key_slot

from hoa.models import Complaint, ComplaintEvent
from locking import FenceLock, LockHeld, LockUnavailable, advance_fence, run_fenced
from locking.asyncio import AsyncFenceLock
from locking.audit import Attempt
from locking.epochs import first_token
from locking.keys import fence_key, lock_key, validate_resource
from locking.models import FenceEvent
from locking.operators import holders
from locking.tests.support import run_async
from tests.harness.processes import frozen
from tests.harness.waiting import wait_until
from tests.topologies import Child, redis_cluster

pytestmark = [
    pytest.mark.skipif(
        not (shutil.which("redis-server") and shutil.which("redis-cli")),
        reason="redis-server/redis-cli not installed (Debian package redis-server)",
    ),
    # One worker runs the module: its module-scoped cluster starts once, not once per worker.
    pytest.mark.xdist_group("topologies-cluster"),
]

TTL = timedelta(seconds=30)


@pytest.fixture(scope="module")
def cluster():
    with redis_cluster(masters=3) as deployment:
        yield deployment


@pytest.fixture
def cluster_lock(cluster):
    client = cluster.client()
    yield FenceLock(client=client)
    client.close()


def unique(prefix: str) -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def fenced_note(complaint: Complaint):
    """The work of a fenced write: advance the complaint's fence, then write a note."""

    def work(lease):
        with transaction.atomic():
            advance_fence(Complaint.objects.filter(pk=complaint.pk), lease)
            ComplaintEvent.objects.create(
                complaint=complaint, kind="note", detail=f"token {lease.token}"
            )
        return lease.token

    return work


@pytest.mark.django_db  # a resource's first grant records its epoch
def test_acquire_busy_extend_and_release_work_on_the_cluster(cluster_lock):
    resource = unique("vendor-assignment:complaint")
    lease = cluster_lock.acquire(resource, ttl=TTL, holder="alice")
    assert lease.token == 1

    with pytest.raises(LockHeld) as busy:
        cluster_lock.acquire(resource, ttl=TTL, holder="bob")
    assert busy.value.holder.startswith("alice on ")
    assert busy.value.token == 1

    cluster_lock.client.pexpire(lock_key(resource), 1000)
    assert lease.extend(timedelta(seconds=60)) is True
    assert cluster_lock.client.pttl(lock_key(resource)) > 30_000

    assert lease.release() is True
    assert lease.release() is False
    assert cluster_lock.client.exists(lock_key(resource)) == 0
    assert cluster_lock.acquire(resource, ttl=TTL).token == 2
    assert int(cluster_lock.client.get(fence_key(resource))) == 2


@pytest.mark.django_db  # a resource's first grant records its epoch
def test_leases_spread_over_every_master_and_holders_finds_them_all(cluster, cluster_lock):
    prefix = unique("monthly-charges:org")
    resources = [f"{prefix}:{number}:2026-01" for number in range(60)]
    leases = [cluster_lock.acquire(resource, ttl=TTL) for resource in resources]

    assert [lease.token for lease in leases] == [1] * 60
    per_master = [node.client().dbsize() for node in cluster.nodes]
    assert all(count > 0 for count in per_master), per_master  # every master ran the script
    assert sum(per_master) >= 120  # a lock and a counter per resource
    found = holders(prefix=prefix, limit=1000, lock=cluster_lock)
    assert sorted(h.resource for h in found) == sorted(resources)
    assert {h.token for h in found} == {1}
    for lease in leases:
        lease.release()


@pytest.mark.django_db(transaction=True)
def test_lost_counter_without_a_recorded_epoch_starts_one_above_the_row_on_the_cluster(
    cluster_lock, maple
):
    """A deployment upgraded from tokens without epochs: the row is at 41, no epoch row."""
    resource = unique("vendor-assignment:complaint")
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    Complaint.objects.filter(pk=complaint.pk).update(last_fence_token=41)
    assert cluster_lock.client.get(fence_key(resource)) is None  # the counter is gone

    token = run_fenced(
        resource,
        fenced_note(complaint),
        ttl=TTL,
        attempt=Attempt(actor="alice", operation="assign_vendor"),
        lock=cluster_lock,
    )

    new = first_token(1) + 1  # epoch 0 starts at 1, is refused, epoch 1 starts above 41
    assert token == new
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == new
    assert int(cluster_lock.client.get(fence_key(resource))) == new
    assert list(ComplaintEvent.objects.values_list("detail", flat=True)) == [f"token {new}"]
    outcomes = FenceEvent.objects.for_resource(resource).order_by("id")
    assert [(e.outcome, e.token) for e in outcomes] == [("stale", 1), ("committed", new)]


@pytest.mark.django_db(transaction=True)
def test_lock_redis_url_with_the_cluster_scheme_puts_the_lock_on_the_cluster(
    cluster, maple, settings, redis_client
):
    settings.LOCK_REDIS_URL = cluster.url
    lock = FenceLock()
    assert isinstance(lock.client, RedisCluster)
    resource = unique("vendor-assignment:complaint")
    complaint = Complaint.objects.create(organization=maple, title="Broken gate")

    token = run_fenced(
        resource,
        fenced_note(complaint),
        ttl=TTL,
        attempt=Attempt(actor="alice", operation="assign_vendor"),
    )

    assert token == 1
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == 1
    assert int(cluster.client().get(fence_key(resource))) == 1
    assert cluster.client().exists(lock_key(resource)) == 0  # released
    assert redis_client.exists(fence_key(resource)) == 0  # not on the cache's Redis


# Printable, no whitespace, no braces: what validate_resource accepts, drawn directly
# (filtering arbitrary text threw most draws away and tripped Hypothesis's health check).
printable_names = st.text(
    alphabet=st.characters(
        codec="utf-8",
        exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"),
        exclude_characters="{}",
    ),
    min_size=1,
    max_size=200,
)


def _is_valid(name: str) -> bool:
    try:
        validate_resource(name)
    except ValueError:
        return False
    return True


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=printable_names)
def test_lock_and_fence_keys_of_any_valid_name_hash_to_one_slot_on_the_server(cluster, name):
    assume(_is_valid(name))
    node = cluster.nodes[0].client()
    lock_slot = node.execute_command("CLUSTER KEYSLOT", lock_key(name))
    fence_slot = node.execute_command("CLUSTER KEYSLOT", fence_key(name))
    assert lock_slot == fence_slot == key_slot(lock_key(name).encode())


def test_production_resource_names_keep_lock_and_fence_together_and_spread_out(cluster):
    node = cluster.nodes[0].client()
    names = [
        f"monthly-charges:org:{org}:2026-{month:02d}" for org in range(1, 401) for month in (1, 2)
    ]
    names += [f"vendor-assignment:complaint:{pk}" for pk in range(1, 801)]
    slots = set()
    for name in names:
        slot = node.execute_command("CLUSTER KEYSLOT", lock_key(name))
        assert node.execute_command("CLUSTER KEYSLOT", fence_key(name)) == slot, name
        slots.add(slot)
    # Different resources spread over the cluster: the tag is the resource, not a constant.
    assert len(slots) > 1000


# -- a shard fails over: LOCK_REDIS_MIN_REPLICAS on Cluster ----------------------------------

# Every node persists each write before answering it: a crashed node comes back with all it
# acknowledged (and a replica with all it had received), nothing more.
DURABLE = ("--appendonly", "yes", "--appendfsync", "always")
FAILOVER_RESOURCE = "vendor-assignment:complaint:cluster-failover"
RETRY_FOR_SECONDS = 30


@pytest.fixture
def replicated_cluster(settings):
    with redis_cluster(masters=3, replicas=1, args=DURABLE) as deployment:
        # A replica writes its first AOF by a background rewrite after its initial full
        # sync; until that ends, a crash can bring it back without what it had received
        # (seen once under a loaded make test). The tests crash nodes: wait for it.
        wait_until(
            lambda: all(aof_settled(node) for node in deployment.nodes),
            what="every node's first AOF on disk",
            timeout=60,
        )
        settings.LOCK_REDIS_URL = deployment.url
        yield deployment


def aof_settled(node) -> bool:
    with node.client(socket_timeout=2) as client:
        persistence = client.info("persistence")
    return not (
        persistence.get("loading")
        or persistence.get("aof_rewrite_in_progress")
        or persistence.get("aof_rewrite_scheduled")
        or persistence.get("async_loading")
    )


def write_note(complaint: Complaint, number: int) -> int:
    """Write note ``number`` under a fresh lease, retrying while the lock is unavailable
    (a shard failing over) as a caller does with a 503; return the token it committed."""

    def work(lease):
        with transaction.atomic():
            advance_fence(Complaint.objects.filter(pk=complaint.pk), lease)
            ComplaintEvent.objects.create(
                complaint=complaint, kind="note", detail=f"note {number} token {lease.token}"
            )
        return lease.token

    deadline = time.monotonic() + RETRY_FOR_SECONDS
    while True:
        try:
            return run_fenced(FAILOVER_RESOURCE, work, ttl=TTL, attempt=Attempt(actor="writer"))
        except LockUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def notes(complaint: Complaint) -> list[str]:
    rows = ComplaintEvent.objects.filter(complaint=complaint, kind="note").order_by("id")
    return list(rows.values_list("detail", flat=True))


def counter_on(node) -> int:
    """The fence counter as ``node`` has it, whether it is a primary or a replica."""
    with node.client(socket_timeout=2) as client:
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("READONLY")  # a replica answers reads on this connection
        pipe.get(fence_key(FAILOVER_RESOURCE))
        return int(pipe.execute()[1] or 0)


def holder_child(complaint: Complaint, subprocess_env, *, min_replicas: int) -> Child:
    """A worker that runs one fenced note; its grant may wait for a replica for 20 s."""
    env = {
        **subprocess_env,
        "LOCK_REDIS_MIN_REPLICAS": str(min_replicas),
        "LOCK_REDIS_WAIT_TIMEOUT_MS": "20000",
        "REDIS_SOCKET_TIMEOUT_SECONDS": "30",
    }
    return Child("fenced-note", FAILOVER_RESOURCE, complaint.pk, 30_000, env=env)


def fail_over(cluster, primary, replica) -> None:
    """The shard's primary crashes with what it never replicated; its replica comes back
    from its own disk and takes the slots over; the old primary comes back from its disk
    and rejoins as the new primary's replica (its unreplicated grants thrown away)."""
    primary.stop(kill=True)
    replica.start()

    def promoted() -> bool:
        with replica.client(socket_timeout=2) as client:
            if client.info("replication")["role"] == "master":
                return True
            with suppress_redis_errors():  # not yet aware of its primary's failure
                client.execute_command("CLUSTER FAILOVER", "TAKEOVER")
        return False

    wait_until(promoted, what="the replica to take the shard over", timeout=30)
    primary.start()
    wait_until(
        lambda: cluster.in_sync(primary) and cluster.healthy(),
        what="the old primary to rejoin as the new one's replica",
        timeout=60,
    )


def suppress_redis_errors():
    from contextlib import suppress

    from redis.exceptions import RedisError

    return suppress(RedisError)


def granted_on(node, child: Child) -> bool:
    """Whether ``node`` holds the lease ``child`` was granted (its pid in the holder label)."""
    with node.client(socket_timeout=2) as client:
        value = client.get(lock_key(FAILOVER_RESOURCE)) or b""
    return f" pid {child.process.pid}".encode() in value


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_grants_wait_for_the_replica_of_their_own_shard_sync_and_async(
    replicated_cluster, settings
):
    """WAIT counts the writes of its connection: run anywhere but on the slot owner's own
    connection, it would count another shard's replicas (all up here) and confirm grants
    that this shard's dead replica never saw."""
    cluster = replicated_cluster
    settings.LOCK_REDIS_MIN_REPLICAS = 1
    settings.LOCK_REDIS_WAIT_TIMEOUT_MS = 300
    resource = unique("vendor-assignment:complaint")
    primary = cluster.primary_of(lock_key(resource))
    elsewhere = next(
        name
        for name in (unique("vendor-assignment:complaint") for _ in range(100))
        if cluster.primary_of(lock_key(name)) is not primary
    )
    lock = FenceLock()

    async def async_grant(name: str) -> int:
        lease = await AsyncFenceLock().acquire(name, ttl=TTL)
        await lease.release()
        return lease.token

    with lock.acquire(resource, ttl=TTL) as lease:
        assert lease.token == 1  # confirmed by the shard's replica
    assert run_async(lambda: async_grant(resource)) == 2

    cluster.replica_of(primary).stop(kill=True)
    with pytest.raises(LockUnavailable, match="0 of 1 replicas confirmed the grant"):
        lock.acquire(resource, ttl=TTL)
    with pytest.raises(LockUnavailable, match="0 of 1 replicas confirmed the grant"):
        run_async(lambda: async_grant(resource))
    assert run_async(lambda: async_grant(elsewhere)) == 1  # its replica is up
    with lock.acquire(elsewhere, ttl=TTL) as lease:
        assert lease.token == 2
    with primary.client(socket_timeout=2) as client:
        assert client.get(lock_key(resource)) is None  # the unconfirmed grants were released
        assert int(client.get(fence_key(resource))) == 4  # and their tokens never used


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_with_min_replicas_a_shard_failover_never_hands_a_token_out_twice(
    replicated_cluster, settings, maple, subprocess_env
):
    cluster = replicated_cluster
    settings.LOCK_REDIS_MIN_REPLICAS = 1
    settings.LOCK_REDIS_WAIT_TIMEOUT_MS = 500
    complaint = Complaint.objects.create(organization=maple, title="Flooded garage")
    primary = cluster.primary_of(lock_key(FAILOVER_RESOURCE))
    replica = cluster.replica_of(primary)
    assert [write_note(complaint, n) for n in range(3)] == [1, 2, 3]  # each confirmed
    assert counter_on(replica) == 3
    replica.stop(kill=True)  # the replica crashes; its disk has every grant it confirmed

    holder = holder_child(complaint, subprocess_env, min_replicas=1)
    try:
        # Its grant runs on the primary (token 4); WAIT finds no replica to confirm it.
        wait_until(lambda: granted_on(primary, holder), what="the holder's grant on the primary")
        assert counter_on(primary) == 4
        with frozen(holder.process.pid):  # the holder of an unconfirmed grant is frozen
            fail_over(cluster, primary, replica)
            assert counter_on(replica) == 3  # the new primary never had grant 4
            newer = write_note(complaint, 3)
        # Thawed, the holder finds its grant's connection gone with the old primary.
        said = holder.expect("unavailable")
        assert holder.finish() == 0
    finally:
        holder.stop()

    assert newer == 4  # the number of the unconfirmed grant, handed out once: to a holder
    assert notes(complaint) == [f"note {n} token {n + 1}" for n in range(4)]
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == 4
    assert "granted" not in said
    refused = FenceEvent.objects.for_resource(FAILOVER_RESOURCE).filter(outcome="unavailable")
    assert refused.filter(actor=f"child {holder.process.pid}").count() == 1
    assert counter_on(primary) == 4  # the old primary, now a replica, has the new history


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_without_min_replicas_a_shard_failover_hands_an_unreplicated_token_out_again(
    replicated_cluster, maple, subprocess_env
):
    """LOCK_REDIS_MIN_REPLICAS=0 on Cluster: the documented gap (the guarantees table),
    pinned. The fence still refuses the second write with the same token; set the option to
    1 to close the gap itself."""
    cluster = replicated_cluster
    complaint = Complaint.objects.create(organization=maple, title="Flooded garage")
    primary = cluster.primary_of(lock_key(FAILOVER_RESOURCE))
    replica = cluster.replica_of(primary)
    assert [write_note(complaint, n) for n in range(3)] == [1, 2, 3]
    # Every write so far on the replica, the third lease's release included (a counter
    # polled alone can stop the replica between a grant and its release: the promoted
    # replica would then hold a lease nobody holds).
    with primary.client(socket_timeout=5) as client:
        assert client.wait(1, 10_000) == 1
    assert counter_on(replica) == 3
    replica.stop(kill=True)

    holder = holder_child(complaint, subprocess_env, min_replicas=0)
    try:
        assert holder.expect("granted") == "granted 4"  # nobody confirmed it
        with frozen(holder.process.pid):
            fail_over(cluster, primary, replica)
            newer = write_note(complaint, 3)
        holder.go()
        # Its write with token 4 is refused (4 is not above the recorded 4): a token handed
        # out twice shows a counter that went back, so run_fenced starts an epoch and retries.
        retried = holder.expect("granted")
        holder.go()
        committed = holder.expect("committed")
        assert holder.finish() == 0
    finally:
        holder.stop()

    assert newer == 4  # token 4 handed out twice: to the frozen holder and to this writer
    assert retried == committed.replace("committed", "granted") == f"granted {first_token(1) + 1}"
    assert notes(complaint) == [f"note {n} token {n + 1}" for n in range(4)] + [
        f"token {first_token(1) + 1}"
    ]
    holder_events = FenceEvent.objects.for_resource(FAILOVER_RESOURCE).filter(
        actor=f"child {holder.process.pid}"
    )
    assert list(holder_events.order_by("id").values_list("outcome", "token")) == [
        ("stale", 4),
        ("committed", first_token(1) + 1),
    ]
