"""Section 3: what a Django user would reach for instead of Redis, next to ours.

The guarded operation is the shape of charge generation: check the run, a 200 ms external
call (a sleep), mark the run completed. Once the holder is inside its call, a loser tries
the same run: its wait, its PostgreSQL round trips (ours should do none) and the backends
``idle in transaction`` half-way through the holder's call are measured. Variants:
``select_for_update`` (with and without ``nowait``), ``advisory``
(``pg_try_advisory_xact_lock``) and ``ours`` (a lease, the call outside any transaction).
"""

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial

import psycopg
import redis
from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from bench import fixtures
from bench.measure import PgRoundTrips, check, median, percentile

TTL = timedelta(seconds=30)
ACTIVITY_SQL = """
SELECT count(*) FILTER (WHERE state = 'idle in transaction'),
       count(*) FILTER (WHERE xact_start IS NOT NULL),
       count(*) FILTER (WHERE wait_event_type = 'Lock')
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def _complete(run_id: int, who: str) -> None:
    from charges.models import MonthlyChargeRun

    MonthlyChargeRun.objects.filter(pk=run_id).update(
        status=MonthlyChargeRun.Status.COMPLETED, completed_at=timezone.now(), completed_by=who
    )


def _select_for_update(run_id: int, external_call, who: str, *, nowait: bool = False) -> str:
    from charges.models import MonthlyChargeRun

    try:
        with transaction.atomic():
            run = MonthlyChargeRun.objects.select_for_update(nowait=nowait).get(pk=run_id)
            if run.is_completed:
                return "already done"
            external_call()
            _complete(run_id, who)
            return "done"
    except OperationalError as exc:
        if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
            return "busy"
        raise


def _advisory(run_id: int, external_call, who: str) -> str:
    from charges.models import MonthlyChargeRun
    from locking import advisory_lock

    with transaction.atomic(), advisory_lock(f"bench-alt:run:{run_id}") as acquired:
        if not acquired:
            return "busy"
        if MonthlyChargeRun.objects.get(pk=run_id).is_completed:
            return "already done"
        external_call()
        _complete(run_id, who)
        return "done"


def _ours(run_id: int, external_call, who: str, *, lock) -> str:
    from charges.models import MonthlyChargeRun
    from locking import LockHeld, advance_fence

    try:
        lease = lock.acquire(f"bench-alt:run:{run_id}", ttl=TTL, holder=who)
    except LockHeld:
        return "busy"
    with lease:
        external_call()  # outside any transaction: no connection is held open meanwhile
        with transaction.atomic():
            advance_fence(MonthlyChargeRun.objects.filter(pk=run_id), lease)
            if MonthlyChargeRun.objects.get(pk=run_id).is_completed:
                return "already done"
            _complete(run_id, who)
            return "done"


def _operation(variant: str, lock) -> Callable[..., str]:
    if variant == "select_for_update":
        return _select_for_update
    if variant == "select_for_update_nowait":
        return lambda run_id, call, who: _select_for_update(run_id, call, who, nowait=True)
    if variant == "advisory":
        return _advisory
    if variant == "ours":
        return lambda run_id, call, who: _ours(run_id, call, who, lock=lock)
    raise ValueError(f"unknown variant {variant!r}")


def _activity_connection() -> psycopg.Connection:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"],
        port=db["PORT"],
        user=db["USER"],
        dbname=db["NAME"],
        password=db.get("PASSWORD") or None,
        autocommit=True,
    )


def _timed(action: Callable[[], str]) -> tuple[str, float]:
    started = time.perf_counter_ns()
    answer = action()
    return answer, (time.perf_counter_ns() - started) / 1000


def _trial(operation, run_id: int, call_seconds: float, sampler, loser_action) -> dict:
    """One holder/loser pair: the loser acts while the holder is in its external call.

    ``loser_action()`` returns ``(answer, microseconds)``; it normally runs the same
    operation on the same run, but may time something else under identical conditions.
    """
    inside = threading.Event()
    out: dict = {}

    def external_call() -> None:
        inside.set()
        time.sleep(call_seconds)

    def holder() -> None:
        try:
            with PgRoundTrips(connection) as trips:
                out["holder"] = operation(run_id, external_call, "holder")
            out["holder_round_trips"] = trips.round_trips
        finally:
            connection.close()

    def loser(ready: threading.Event) -> None:
        try:
            connection.ensure_connection()  # a web worker has its connection already
            ready.set()
            inside.wait(10)
            with PgRoundTrips(connection) as trips:
                out["loser"], out["loser_us"] = loser_action()
            out["loser_round_trips"] = trips.round_trips
        finally:
            connection.close()

    loser_ready = threading.Event()
    threads = [
        threading.Thread(target=loser, args=(loser_ready,)),
        threading.Thread(target=holder),
    ]
    threads[0].start()
    loser_ready.wait(10)
    threads[1].start()
    if not inside.wait(10):
        raise RuntimeError("the holder never reached its external call")
    time.sleep(call_seconds / 2)
    out["idle_in_transaction"], out["open_transactions"], out["waiting_on_lock"] = sampler.execute(
        ACTIVITY_SQL
    ).fetchone()
    for thread in threads:
        thread.join(30)
    return out


def _uncontended_acquire_us(lock, count: int) -> list[float]:
    """Acquire a free resource ``count`` times in a hot loop (release untimed)."""
    samples = []
    for _ in range(count):
        started = time.perf_counter_ns()
        lease = lock.acquire("bench-alt:uncontended", ttl=TTL)
        samples.append((time.perf_counter_ns() - started) / 1000)
        lease.release()
    return samples


def _hold_only(lock, run_id: int, external_call, who: str) -> str:
    """A holder of another resource that makes its external call and touches no row."""
    with lock.acquire(f"bench-alt:reference-holder:{run_id}", ttl=TTL, holder=who):
        external_call()
    return "done"


def _free_acquire(lock, resource: str) -> tuple[str, float]:
    started = time.perf_counter_ns()
    lease = lock.acquire(resource, ttl=TTL)
    elapsed = (time.perf_counter_ns() - started) / 1000
    lease.release()
    return "granted", elapsed


def run(*, variant: str, redis_url: str, trials: int, call_seconds: float = 0.2) -> dict:
    """Run ``trials`` holder/loser pairs of ``variant``; report the loser's answer and cost."""
    from charges.models import MonthlyChargeRun
    from locking import FenceLock

    lock = FenceLock(client=redis.Redis.from_url(redis_url)) if variant == "ours" else None
    operation = _operation(variant, lock)
    org = fixtures.organization(f"bench-alt-{variant.replace('_', '-')}")
    runs = fixtures.fresh_runs(org, trials + 1)
    warm = runs.pop()
    operation(warm.pk, lambda: None, "warm-up")  # code paths and connections warm
    connection.close()

    metrics: dict = {}
    if lock is not None:
        metrics["acquire_hot_loop_us"] = round(median(_uncontended_acquire_us(lock, 300)), 1)

    sampler = _activity_connection()
    outcomes, reference = [], []
    for run_row in runs:
        pk = run_row.pk
        loser_action = partial(
            _timed, partial(operation, pk, partial(time.sleep, call_seconds), "loser")
        )
        outcomes.append(_trial(operation, pk, call_seconds, sampler, loser_action))
        if lock is not None:
            # The reference: one uncontended acquire (of a free resource) taken exactly
            # as the loser takes its answer, in the same kind of trial. A hot loop would
            # flatter it: the loser runs once, in a thread just woken, with cold caches.
            free = partial(_free_acquire, lock, f"bench-alt:free:{pk}")
            holder = partial(_hold_only, lock)
            reference.append(_trial(holder, pk, call_seconds, sampler, free)["loser_us"])
    sampler.close()

    loser_us = [o["loser_us"] for o in outcomes]
    completed_by = dict(
        MonthlyChargeRun.objects.filter(pk__in=[r.pk for r in runs]).values_list(
            "pk", "completed_by"
        )
    )
    holder_ok = all(o["holder"] == "done" for o in outcomes)
    losers = sorted({o["loser"] for o in outcomes})
    metrics.update(
        {
            "loser_p50_ms": round(median(loser_us) / 1000, 2),
            "loser_p99_ms": round(percentile(loser_us, 99) / 1000, 2),
            "loser_answer": ", ".join(losers),
            "loser_round_trips": max(o["loser_round_trips"] for o in outcomes),
            "holder_round_trips": max(o["holder_round_trips"] for o in outcomes),
            "idle_in_transaction": max(o["idle_in_transaction"] for o in outcomes),
            "open_transactions": max(o["open_transactions"] for o in outcomes),
            "waiting_on_lock": max(o["waiting_on_lock"] for o in outcomes),
        }
    )
    if lock is not None:
        metrics["uncontended_acquire_us"] = round(median(reference), 1)
        metrics["loser_vs_acquire"] = round(median(loser_us) / median(reference), 2)
    return {
        "samples_us": loser_us,
        "metrics": metrics,
        "counts": {"db_round_trips_loser": metrics["loser_round_trips"]},
        "invariants": [
            check(
                "each guarded run completed once, by its holder",
                holder_ok and all(completed_by[r.pk] == "holder" for r in runs),
                f"{len(runs)} trials; loser answers: {', '.join(losers)}",
            )
        ],
    }
