"""Section 1: one lock cycle (acquire + release), single client, loopback.

Every variant gets the same ``redis.Redis`` client on the bench's private Redis and is used
as its documentation shows (a lock object per use, a non-blocking acquire, a release):
``ping`` (the floor of any round trip), ``seed`` (the lesson's ``SET NX PX`` + ``INCR`` +
``DEL``), ``redis_py``, ``python_redis_lock``, ``pottery`` (Redlock, one master), ``ours``
(``FenceLock``: one script grants the lease and issues the token), ``scripts_only`` (our
two scripts called bare: a diagnostic floor, not a lock a caller would use).
"""

import functools
import time
from collections.abc import Callable
from contextlib import contextmanager
from datetime import timedelta

import redis

from bench.measure import check, commandstats, executed_per_op, sent_per_op

TTL = timedelta(seconds=30)


def _ping(client: redis.Redis) -> Callable[[], None]:
    def cycle() -> None:
        client.ping()

    return cycle


def _seed(client: redis.Redis) -> Callable[[], None]:
    # The seed's Go code, line for line: SetNX(lock, "held", ttl); Incr(fence); Del(lock).
    lock_name, fence_name = "lock:bench-seed", "lock:bench-seed:fence"
    ttl_ms = int(TTL.total_seconds() * 1000)

    def cycle() -> None:
        if not client.set(lock_name, "held", nx=True, px=ttl_ms):
            raise RuntimeError("seed lock was held")
        client.incr(fence_name)
        client.delete(lock_name)

    return cycle


def _redis_py(client: redis.Redis) -> Callable[[], None]:
    def cycle() -> None:
        lock = client.lock("bench-redis-py", timeout=TTL.total_seconds())
        if not lock.acquire(blocking=False):
            raise RuntimeError("redis-py lock was held")
        lock.release()

    return cycle


def _python_redis_lock(client: redis.Redis) -> Callable[[], None]:
    import redis_lock

    def cycle() -> None:
        lock = redis_lock.Lock(client, "bench-python-redis-lock", expire=int(TTL.total_seconds()))
        if not lock.acquire(blocking=False):
            raise RuntimeError("python-redis-lock was held")
        lock.release()

    return cycle


def _pottery(client: redis.Redis) -> Callable[[], None]:
    from pottery import Redlock

    def cycle() -> None:
        lock = Redlock(key="bench-pottery", masters={client}, auto_release_time=TTL.total_seconds())
        if not lock.acquire(blocking=False):
            raise RuntimeError("pottery Redlock was held")
        lock.release()

    return cycle


def _scripts_only(client: redis.Redis) -> Callable[[], None]:
    # Our two Lua scripts called bare (arguments prepared once, no Lease, no checks): the
    # floor under FenceLock with this client library. Internals on purpose: a harness.
    from locking.lock import ACQUIRE_LUA, RELEASE_LUA

    acquire, release = client.register_script(ACQUIRE_LUA), client.register_script(RELEASE_LUA)
    keys = ["lock:{bench-floor}", "fence:{bench-floor}", "seed:{bench-floor}"]
    args = ["0" * 32, 30000, "bench", "", 2000]
    client.set(keys[1], 0, nx=True)  # a counter exists: the normal grant, no new epoch

    def cycle() -> None:
        reply = acquire(keys=keys, args=args)
        release(keys=keys[:1], args=[reply[2]])

    return cycle


class _Ours:
    """FenceLock per use, as ``run_fenced`` does; checks that tokens keep rising."""

    RESOURCE = "bench-ours"

    def __init__(self, client: redis.Redis):
        from locking import FenceLock, fence_key

        # Every argument given: no Django settings needed. The counter exists, as it does
        # for every resource after its first grant (which records epoch 0 in PostgreSQL).
        self.fence_lock = functools.partial(FenceLock, using="default", min_replicas=0)
        client.set(fence_key(self.RESOURCE), 0, nx=True)
        self.client = client
        self.last_token = 0
        self.token_regressions = 0

    def __call__(self) -> None:
        lease = self.fence_lock(client=self.client).acquire(self.RESOURCE, ttl=TTL)
        if lease.token <= self.last_token:
            self.token_regressions += 1
        self.last_token = lease.token
        lease.release()


VARIANTS: dict[str, Callable[[redis.Redis], Callable[[], None]]] = {
    "ping": _ping,
    "seed": _seed,
    "redis_py": _redis_py,
    "python_redis_lock": _python_redis_lock,
    "pottery": _pottery,
    "scripts_only": _scripts_only,
    "ours": _Ours,
    "ours_fsync_always": _Ours,
}


@contextmanager
def _durability(client: redis.Redis, variant: str):
    """Run ``ours_fsync_always`` with every write fsynced; restore the server after it."""
    if variant != "ours_fsync_always":
        yield
        return
    saved = {key: client.config_get(key)[key] for key in ("appendonly", "appendfsync")}
    client.config_set("appendfsync", "always")
    client.config_set("appendonly", "yes")  # starts an AOF rewrite: wait for it to end
    deadline = time.monotonic() + 30
    while client.info("persistence").get("aof_rewrite_in_progress"):
        if time.monotonic() > deadline:
            raise RuntimeError("the AOF rewrite did not finish in 30 s")
        time.sleep(0.05)
    try:
        yield
    finally:
        client.config_set("appendonly", saved["appendonly"])
        client.config_set("appendfsync", saved["appendfsync"])


def run(*, variant: str, redis_url: str, iterations: int, warmup: int, counted: int = 20) -> dict:
    """Time ``iterations`` cycles of ``variant``; count the Redis commands of a cycle."""
    client = redis.Redis.from_url(redis_url)
    with _durability(client, variant):
        cycle = VARIANTS[variant](client)
        for _ in range(warmup):  # connections made, scripts loaded, code paths warm
            cycle()
        before = commandstats(client)
        samples = []
        clock = time.perf_counter_ns
        for _ in range(iterations):
            started = clock()
            cycle()
            samples.append((clock() - started) / 1000)
        executed = executed_per_op(before, commandstats(client), iterations)
        sent = sent_per_op(redis_url, cycle, counted)
    invariants = []
    if isinstance(cycle, _Ours):
        detail = f"last token {cycle.last_token}, regressions {cycle.token_regressions}"
        rising = cycle.token_regressions == 0
        invariants.append(check("fencing tokens strictly increasing (lock cycle)", rising, detail))
    return {
        "samples_us": samples,
        "counts": {
            "redis_sent": sent,
            "redis_sent_total": round(sum(sent.values()), 3),
            "redis_executed": executed,
            "redis_executed_total": round(sum(executed.values()), 3),
            "db_round_trips": 0,
        },
        "invariants": invariants,
    }
