"""Section 1b: what fence safety across Redis data loss costs (docs/locking.md, epochs).

Fence check, one complaint row per process, a new token per operation:

- ``token``: ``advance_fence(queryset, token)``: the row check alone (the baseline).
- ``lease``: ``advance_fence(queryset, lease)``: the same UPDATE with the epoch check
  (``NOT EXISTS`` on ``locking_fenceepoch``), what every service runs.

Grant + release, one resource per process:

- ``normal``: the counter exists: one script call.
- ``after_loss``: the counter was just lost: the grant records the next epoch in
  PostgreSQL and seeds the counter (what the first grant after a loss pays, once).
- ``wait``: ``LOCK_REDIS_MIN_REPLICAS=1`` against a private replica of the bench Redis:
  the grant script and ``WAIT 1`` pipelined on one connection.
"""

import itertools
import subprocess
import tempfile
import time
from datetime import timedelta

import redis
from django.db import transaction

from bench import fixtures
from bench.cases.fenced_writes import _timed_loop
from bench.environment import free_port, wait_until

TTL = timedelta(seconds=30)


def fence(*, variant: str, ops: int, warmup: int = 20) -> dict:
    """Time ``ops`` fence checks, each with a token above the last."""
    from hoa.models import Complaint
    from locking import Lease, advance_fence

    org = fixtures.organization("bench-epochs")
    [complaint] = fixtures.complaints(org, 1, title=fixtures.unique_label(f"fence-{variant}"))
    resource = f"bench-epochs:complaint:{complaint.pk}"
    rows = Complaint.objects.filter(pk=complaint.pk)

    def check(token: int) -> None:
        if variant == "lease":
            held = Lease(
                resource, token, "bench", None, _lock=None, _value="", _monotonic_deadline=0
            )
            with transaction.atomic():
                advance_fence(rows, held)
        else:
            with transaction.atomic():
                advance_fence(rows, token)

    tokens = iter(range(1, warmup + ops + 1))
    for _ in range(warmup):
        check(next(tokens))
    samples = _timed_loop(check, [next(tokens) for _ in range(ops)])
    recorded = rows.values_list("last_fence_token", flat=True).get()
    return {
        "samples_us": samples,
        "counts": {"db_round_trips": 1},
        "invariants": [
            {
                "name": "every fence check recorded its token",
                "ok": recorded == warmup + ops,
                "detail": f"row at {recorded}, {warmup + ops} checks",
            }
        ],
    }


class _Replica:
    """A private redis-server replicating ``master_port``; stopped by ``close()``."""

    def __init__(self, master_port: int):
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                *("redis-server", "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--dir", tempfile.mkdtemp(prefix="hoa-bench-replica-"), "--save", ""),
                *("--replicaof", "127.0.0.1", str(master_port)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_timeout=1)
        wait_until(
            lambda: self._up(client), timeout=30, what="the bench replica to sync with its master"
        )

    @staticmethod
    def _up(client) -> bool:
        try:
            return client.info("replication").get("master_link_status") == "up"
        except redis.RedisError:
            return False

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def grant(*, variant: str, redis_url: str, ops: int, warmup: int = 20) -> dict:
    """Time ``ops`` grant + release cycles of ``variant``."""
    from locking import FenceLock, fence_key

    client = redis.Redis.from_url(redis_url)
    replica = (
        _Replica(client.connection_pool.connection_kwargs["port"]) if variant == "wait" else None
    )
    try:
        lock = FenceLock(
            client=client, min_replicas=1 if replica else 0, replica_timeout=timedelta(seconds=1)
        )
        resource = fixtures.unique_label(f"bench-grant-{variant}")
        tokens: list[int] = []

        def cycle(_item) -> None:
            if variant == "after_loss":
                client.delete(fence_key(resource))
            lease = lock.acquire(resource, ttl=TTL)
            tokens.append(lease.token)
            lease.release()

        for _ in range(warmup):
            cycle(None)
        started = time.perf_counter()
        samples = _timed_loop(cycle, range(ops))
        elapsed = time.perf_counter() - started
    finally:
        if replica is not None:
            replica.close()
    rising = all(a < b for a, b in itertools.pairwise(tokens))
    return {
        "samples_us": samples,
        "metrics": {"grants_per_s": round(ops / elapsed, 1)},
        "invariants": [
            {
                "name": f"tokens strictly increasing ({variant})",
                "ok": rising,
                "detail": f"{len(tokens)} grants, last token {tokens[-1]}",
            }
        ],
    }
