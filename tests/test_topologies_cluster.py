"""The fence lock on a real 3-master Redis Cluster (no replicas), started for this module.

Each script touches ``lock:{r}`` and ``fence:{r}``; the ``{r}`` hash tag puts both in one
slot, which is what lets a single EVALSHA run on whichever master owns it.
"""

import shutil
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster
from redis.crc import key_slot

from hoa.models import Complaint, ComplaintEvent
from locking import (
    Attempt,
    FenceLock,
    LockHeld,
    advance_fence,
    fence_key,
    holders,
    lock_key,
    run_fenced,
    validate_resource,
)
from locking.epochs import first_token
from locking.models import FenceEvent
from tests.topologies import redis_cluster

pytestmark = pytest.mark.skipif(
    not (shutil.which("redis-server") and shutil.which("redis-cli")),
    reason="redis-server/redis-cli not installed (Debian package redis-server)",
)

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
