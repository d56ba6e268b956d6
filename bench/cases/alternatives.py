"""Section 3: what a Django user would reach for instead of Redis, next to ours: a loser during
the holder's 200 ms external call (docs/benchmarks.md, "The cases")."""

import threading
import time
from functools import partial

import psycopg
import redis
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from bench import fixtures
from bench.measure import PgRoundTrips, check, median, percentile, result, since_us
from charges.models import MonthlyChargeRun
from locking import FenceLock, LockHeld, advance_fence, unfenced_writes
from locking.advisory import advisory_lock

ACTIVITY_SQL = """
SELECT count(*) FILTER (WHERE state = 'idle in transaction'),
       count(*) FILTER (WHERE xact_start IS NOT NULL),
       count(*) FILTER (WHERE wait_event_type = 'Lock')
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def _complete(run_id: int, who: str) -> None:
    MonthlyChargeRun.objects.filter(pk=run_id).update(
        status=MonthlyChargeRun.Status.COMPLETED, completed_at=timezone.now(), completed_by=who
    )


def _call_and_complete_unfenced(run, external_call, who: str) -> str:
    """The call, then the run written unfenced (a strict table: it says so, two round trips)."""
    if run.is_completed:
        return "already done"
    external_call()
    with unfenced_writes():
        _complete(run.pk, who)
    return "done"


def _select_for_update(run_id: int, external_call, who: str, *, nowait: bool = False) -> str:
    try:
        with transaction.atomic():
            run = MonthlyChargeRun.objects.select_for_update(nowait=nowait).get(pk=run_id)
            return _call_and_complete_unfenced(run, external_call, who)
    except OperationalError as exc:
        if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
            return "busy"
        raise


def _advisory(run_id: int, external_call, who: str) -> str:
    with transaction.atomic(), advisory_lock(f"bench-alt:run:{run_id}") as acquired:
        if not acquired:
            return "busy"
        run = MonthlyChargeRun.objects.get(pk=run_id)
        return _call_and_complete_unfenced(run, external_call, who)


def _ours(run_id: int, external_call, who: str, *, lock) -> str:
    try:
        lease = lock.acquire(f"bench-alt:run:{run_id}", ttl=fixtures.TTL, holder=who)
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


def _hold_only(run_id: int, external_call, who: str, *, lock) -> str:
    """A holder of another resource that makes its external call and touches no row."""
    with lock.acquire(f"bench-alt:reference-holder:{run_id}", ttl=fixtures.TTL, holder=who):
        external_call()
    return "done"


def _timed(action) -> tuple[str, float]:
    started = time.perf_counter_ns()
    answer = action()
    return answer, since_us(started)


def _free_acquire(lock, resource: str) -> tuple[str, float]:
    lease, elapsed = _timed(lambda: lock.acquire(resource, ttl=fixtures.TTL))
    lease.release()
    return "granted", elapsed


def _trial(operation, run_id: int, call_seconds: float, sampler, loser_action) -> dict:
    """One holder/loser pair: ``loser_action()`` -> (answer, µs) during the holder's call."""
    inside = threading.Event()
    loser_ready = threading.Event()
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

    def loser() -> None:
        try:
            connection.ensure_connection()  # a web worker has its connection already
            loser_ready.set()
            inside.wait(10)
            with PgRoundTrips(connection) as trips:
                out["loser"], out["loser_us"] = loser_action()
            out["loser_round_trips"] = trips.round_trips
        finally:
            connection.close()

    threads = [threading.Thread(target=loser), threading.Thread(target=holder)]
    threads[0].start()
    loser_ready.wait(10)
    threads[1].start()
    if not inside.wait(10):
        raise RuntimeError("the holder never reached its external call")
    time.sleep(call_seconds / 2)
    activity = sampler.execute(ACTIVITY_SQL).fetchone()
    out["idle_in_transaction"], out["open_transactions"], out["waiting_on_lock"] = activity
    for thread in threads:
        thread.join(30)
    return out


def run(*, variant: str, redis_url: str, trials: int, call_seconds: float = 0.2) -> dict:
    lock = FenceLock(client=redis.Redis.from_url(redis_url)) if variant == "ours" else None
    operation = {"select_for_update": _select_for_update, "advisory": _advisory,
                 "select_for_update_nowait": partial(_select_for_update, nowait=True),
                 "ours": partial(_ours, lock=lock)}[variant]  # fmt: skip
    org = fixtures.organization(f"bench-alt-{variant.replace('_', '-')}")
    runs = fixtures.fresh_runs(org, trials + 1)
    operation(runs.pop().pk, lambda: None, "warm-up")  # code paths and connections warm
    connection.close()

    metrics: dict = {}
    if lock is not None:
        hot_loop = [_free_acquire(lock, "bench-alt:uncontended")[1] for _ in range(300)]
        metrics["acquire_hot_loop_us"] = round(median(hot_loop), 1)

    sampler = psycopg.connect(**connection.get_connection_params(), autocommit=True)
    outcomes, reference = [], []
    for pk in (run_row.pk for run_row in runs):
        loser = partial(_timed, partial(operation, pk, partial(time.sleep, call_seconds), "loser"))
        outcomes.append(_trial(operation, pk, call_seconds, sampler, loser))
        if lock is not None:
            # The reference: a free resource's acquire, taken as the loser takes its answer.
            free = partial(_free_acquire, lock, f"bench-alt:free:{pk}")
            holder = partial(_hold_only, lock=lock)
            reference.append(_trial(holder, pk, call_seconds, sampler, free)["loser_us"])
    sampler.close()

    loser_us = [o["loser_us"] for o in outcomes]
    completed = MonthlyChargeRun.objects.filter(pk__in=[r.pk for r in runs], completed_by="holder")
    losers = sorted({o["loser"] for o in outcomes})
    metrics["loser_p50_ms"] = round(median(loser_us) / 1000, 2)
    metrics["loser_p99_ms"] = round(percentile(loser_us, 99) / 1000, 2)
    metrics["loser_answer"] = ", ".join(losers)
    highest = "loser_round_trips holder_round_trips idle_in_transaction open_transactions"
    for name in f"{highest} waiting_on_lock".split():
        metrics[name] = max(o[name] for o in outcomes)
    if lock is not None:
        metrics["uncontended_acquire_us"] = round(median(reference), 1)
        metrics["loser_vs_acquire"] = round(median(loser_us) / median(reference), 2)
    ok = all(o["holder"] == "done" for o in outcomes) and completed.count() == len(runs)
    detail = f"{len(runs)} trials; loser answers: {', '.join(losers)}"
    invariant = check("each guarded run completed once, by its holder", ok, detail)
    counts = {"db_round_trips_loser": metrics["loser_round_trips"]}
    return result(loser_us, invariant, metrics=metrics, counts=counts)
