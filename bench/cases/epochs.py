"""Sections 1b/1c: what fence safety across Redis data loss costs (docs/locking/epochs.md):
a fence check with and without the lease's record, a grant with its counter lost or replicated."""

import itertools
from datetime import timedelta

import redis
from django.db import transaction

from bench import fixtures
from bench.environment import BenchRedis, wait_until
from bench.measure import check, result, timed_loop
from hoa.models import Complaint
from locking import FenceLock, FencingToken, advance_fence
from locking.keys import fence_key


def fence(*, variant: str, ops: int, warmup: int = 20) -> dict:
    org = fixtures.organization("bench-epochs")
    [complaint] = fixtures.complaints(org, 1, title=fixtures.unique_label(f"fence-{variant}"))
    resource = f"bench-epochs:complaint:{complaint.pk}"
    rows = Complaint.objects.filter(pk=complaint.pk)

    def fenced(token: int) -> None:
        with transaction.atomic():
            if variant == "lease":
                advance_fence(rows, FencingToken(resource, token, "bench"))
            else:
                rows.filter(last_fence_token__lt=token).update(last_fence_token=token)

    samples = timed_loop(fenced, range(1, warmup + ops + 1), warmup)
    recorded = rows.values_list("last_fence_token", flat=True).get()
    ok, detail = recorded == warmup + ops, f"row at {recorded}, {warmup + ops} checks"
    invariant = check("every fence check recorded its token", ok, detail)
    return result(samples, invariant, counts={"db_round_trips": 1})


def _replica_of(master_port: int) -> BenchRedis:
    replica = BenchRedis("--save", "", "--replicaof", "127.0.0.1", str(master_port)).start()
    client = redis.Redis(port=replica.port, socket_timeout=1)
    synced = lambda: client.info("replication").get("master_link_status") == "up"  # noqa: E731
    wait_until(synced, timeout=30, what="the replica's sync", errors=(redis.RedisError,))
    return replica


def grant(*, variant: str, redis_url: str, ops: int, warmup: int = 20) -> dict:
    client = redis.Redis.from_url(redis_url)
    master_port = client.connection_pool.connection_kwargs["port"]
    replica = _replica_of(master_port) if variant == "wait" else None
    try:
        replicas = {"min_replicas": 1 if replica else 0, "replica_timeout": timedelta(seconds=1)}
        lock = FenceLock(client=client, **replicas)
        resource = fixtures.unique_label(f"bench-grant-{variant}")
        tokens: list[int] = []

        def cycle(_item) -> None:
            if variant == "after_loss":
                client.delete(fence_key(resource))
            lease = lock.acquire(resource, ttl=fixtures.TTL)
            tokens.append(lease.token)
            lease.release()

        samples = timed_loop(cycle, range(warmup + ops), warmup)
    finally:
        if replica is not None:
            replica.stop()
    rising = all(a < b for a, b in itertools.pairwise(tokens))
    detail = f"{len(tokens)} grants, last token {tokens[-1]}"
    invariant = check(f"tokens strictly increasing ({variant})", rising, detail)
    return result(samples, invariant, metrics={"grants_per_s": round(1e6 * ops / sum(samples), 1)})
