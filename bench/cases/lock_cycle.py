"""Section 1: one lock cycle (acquire + release), one ``redis.Redis`` client for every variant,
each used as its documentation shows (docs/benchmarks.md, "The cases")."""

from contextlib import contextmanager, nullcontext
from datetime import timedelta
from functools import partial
from operator import attrgetter

import redis
import redis_lock
from pottery import Redlock

from bench.environment import wait_until
from bench.measure import check, redis_timed, result, sent_per_op, timed_loop
from locking import FenceLock, LeaseState
from locking.keys import fence_key
from locking.scripts import ACQUIRE_LUA, RELEASE_LUA

TTL = timedelta(seconds=30)


def _library_lock(new_lock, client: redis.Redis):

    def cycle() -> None:
        lock = new_lock(client)
        if not lock.acquire(blocking=False):
            raise RuntimeError(f"{type(lock).__name__} was held")
        lock.release()

    return cycle


def _seed(client: redis.Redis):
    # The seed's Go code, line for line: SetNX(lock, "held", ttl); Incr(fence); Del(lock).
    ttl_ms = int(TTL.total_seconds() * 1000)

    def cycle() -> None:
        if not client.set("lock:bench-seed", "held", nx=True, px=ttl_ms):
            raise RuntimeError("seed lock was held")
        client.incr("lock:bench-seed:fence")
        client.delete("lock:bench-seed")

    return cycle


def _scripts_only(client: redis.Redis):
    # Our two Lua scripts bare, as FenceLock calls them (EVALSHA on the client): the floor.
    acquire, release = client.script_load(ACQUIRE_LUA), client.script_load(RELEASE_LUA)
    keys = ("lock:{bench-floor}", "fence:{bench-floor}", "seed:{bench-floor}")
    args = ("0" * 32, 30000, "bench", "", 2000)
    client.set(keys[1], 0, nx=True)  # a counter exists: the normal grant, no new epoch
    evalsha = client.evalsha

    def cycle() -> None:
        reply = evalsha(acquire, 3, *keys, *args)
        evalsha(release, 1, keys[0], reply[2])

    return cycle


class _Ours:
    """A FenceLock per use, as ``run_fenced`` does; counts tokens that fail to rise."""

    RESOURCE = "bench-ours"

    def __init__(self, client: redis.Redis):
        # Every argument given: no Django settings needed. The counter exists, as after a grant.
        self.fence_lock = partial(FenceLock, client, using="default", min_replicas=0)
        client.set(fence_key(self.RESOURCE), 0, nx=True)
        self.last_token = self.token_regressions = 0

    def __call__(self) -> None:
        lease = self.fence_lock().acquire(self.RESOURCE, ttl=TTL)
        self.token_regressions += lease.token <= self.last_token
        self.last_token = lease.token
        lease.release()


SECONDS = TTL.total_seconds()
VARIANTS = {
    "ping": lambda client: client.ping, "seed": _seed, "scripts_only": _scripts_only,
    "ours": _Ours, "ours_fsync_always": _Ours,
    "redis_py": partial(_library_lock, lambda c: c.lock("bench-redis-py", timeout=SECONDS)),
    "python_redis_lock": partial(
        _library_lock, lambda c: redis_lock.Lock(c, "bench-python-redis-lock", expire=int(SECONDS))
    ),
    "pottery": partial(_library_lock, lambda c: Redlock(
        key="bench-pottery", masters={c}, auto_release_time=SECONDS)),
}  # fmt: skip


@contextmanager
def _fsync_always(client: redis.Redis):
    """Every write fsynced while the block runs; the server's settings restored after it."""
    saved = {key: client.config_get(key)[key] for key in ("appendonly", "appendfsync")}
    client.config_set("appendfsync", "always")
    client.config_set("appendonly", "yes")  # starts an AOF rewrite: wait for it to end
    rewritten = lambda: not client.info("persistence").get("aof_rewrite_in_progress")  # noqa: E731
    wait_until(rewritten, timeout=30, what="the AOF rewrite")
    try:
        yield
    finally:
        for key, value in saved.items():
            client.config_set(key, value)


def run(*, variant: str, redis_url: str, iterations: int, warmup: int, counted: int = 20) -> dict:
    client = redis.Redis.from_url(redis_url)
    with _fsync_always(client) if variant == "ours_fsync_always" else nullcontext():
        cycle, cycles = VARIANTS[variant](client), range(warmup + iterations)
        # The warm-up: connections made, scripts loaded, code paths warm.
        samples, counts = redis_timed(lambda _: cycle(), cycles, redis_url, warmup)
        counts.update(sent_per_op(redis_url, cycle, counted), db_round_trips=0)
    counts["redis_executed_total"] = round(sum(counts["redis_executed"].values()), 3)
    if not isinstance(cycle, _Ours):
        return result(samples, counts=counts)
    detail = f"last token {cycle.last_token}, regressions {cycle.token_regressions}"
    rising = cycle.token_regressions == 0
    invariant = check("fencing tokens strictly increasing (lock cycle)", rising, detail)
    return result(samples, invariant, counts=counts)


READS_PER_SAMPLE = 1000


def lease_reads(*, variant: str, redis_url: str, iterations: int, warmup: int) -> dict:
    """Time reading a held lease's ``token``, ``state``, ``check()``: 1,000 a sample (µs = ns)."""
    client = redis.Redis.from_url(redis_url)
    client.set(fence_key("bench-state"), 0, nx=True)  # the normal grant: no new epoch
    lock = FenceLock(client, using="default", min_replicas=0)
    lease = lock.acquire("bench-state", ttl=timedelta(hours=1))
    read = lease.check if variant == "check" else partial(attrgetter(variant), lease)

    def thousand_reads(_) -> None:
        for _ in range(READS_PER_SAMPLE):
            read()

    samples = timed_loop(thousand_reads, range(warmup + iterations), warmup)
    held = lease.state is LeaseState.HELD
    invariant = check("the lease stays held while it is read", held, f"state {lease.state}")
    lease.release()
    return result(samples, invariant, counts={"redis_sent_total": 0, "db_round_trips": 0})
