"""Section 4: processes on one resource, or one each, looping acquire, one fenced commit (id
order is commit order), release; when busy, ``backoff``, ``wait`` or ``naive`` retry."""

import multiprocessing
import os
import random
import time
from datetime import timedelta

import redis
from django.db import connection, connections, transaction

from bench import fixtures
from bench.measure import check, median, percentile, result, since_us
from hoa.models import Complaint
from locking import FenceLock, LockHeld, StaleFencingToken, advance_fence

# The same constants as locking.scripts's wait= backoff (restated: bench imports no internals).
BACKOFF_BASE_SECONDS = 0.01
BACKOFF_CAP_SECONDS = 0.25
# Every commit, in commit order (id order).
COMMIT_LOG_DDL = """CREATE TABLE IF NOT EXISTS bench_commit_log (id bigserial PRIMARY KEY,
    label text NOT NULL, resource text NOT NULL, token bigint NOT NULL, pid integer NOT NULL)"""
INSERT_LOG = "INSERT INTO bench_commit_log (label, resource, token, pid) VALUES (%s, %s, %s, %s)"
# Rows logged, and resources whose tokens do not strictly increase in commit (id) order.
TOKEN_ORDER_SQL = """
SELECT count(*), count(DISTINCT resource) FILTER (WHERE token <= previous)
FROM (SELECT resource, token, lag(token) OVER (PARTITION BY resource ORDER BY id) AS previous
      FROM bench_commit_log WHERE label = %s) AS logged
"""


def _client(barrier, results, complaint_id: int, *, mode, seconds, redis_url, ttl, label) -> None:
    lock = FenceLock(client=redis.Redis.from_url(redis_url))
    resource = f"vendor-assignment:complaint:{complaint_id}"
    fence = Complaint.objects.filter(pk=complaint_id)
    connection.ensure_connection()
    lock.client.ping()
    barrier.wait(60)
    started, cpu_started = time.monotonic(), time.process_time()
    deadline = started + seconds
    report = {"resource": resource, "successes": 0, "busy": 0, "stale": 0}
    busy_us, wait_us, intervals = [], [], []
    attempt = 0
    while (now := time.monotonic()) < deadline:
        waits = {"wait": timedelta(seconds=deadline - now)} if mode == "wait" else {}
        asked = time.perf_counter_ns()
        try:
            lease = lock.acquire(resource, ttl=ttl, **waits)
        except LockHeld:
            report["busy"] += 1
            if mode == "wait":
                continue  # the wait ran into the deadline: not an answer to time
            busy_us.append(since_us(asked))
            if mode == "backoff":
                cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt)
                time.sleep(random.uniform(0, cap))
                attempt += 1
            continue
        if mode == "wait":
            wait_us.append(since_us(asked))
        attempt = 0
        entered = time.monotonic()
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                advance_fence(fence, lease)
                cursor.execute(INSERT_LOG, [label, resource, lease.token, os.getpid()])
        except StaleFencingToken:
            report["stale"] += 1
        else:
            report["successes"] += 1
            intervals.append((entered, time.monotonic()))
        lease.release()
    report.update(elapsed=time.monotonic() - started, cpu=time.process_time() - cpu_started,
                  busy_us=busy_us, wait_us=wait_us, intervals=intervals)  # fmt: skip
    results.put(report)
    connection.close()


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat; idle and iowait count as idle."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def _overlaps(intervals: list[tuple[float, float]]) -> int:
    count, latest_end = 0, float("-inf")
    for entered, left in sorted(intervals):
        count += entered < latest_end
        latest_end = max(latest_end, left)
    return count


def run(
    *, mode: str, processes: int, shared: bool, seconds: float, redis_url: str,
    ttl_seconds: float = 10,
) -> dict:  # fmt: skip
    label = fixtures.unique_label(f"contention-{mode}")
    org = fixtures.organization("bench-contention")
    rows = fixtures.complaints(org, 1 if shared else processes, title=label)
    with connection.cursor() as cursor:
        cursor.execute(COMMIT_LOG_DDL)
    connections.close_all()  # children must not inherit this process's connections
    spec = {"mode": mode, "seconds": seconds, "redis_url": redis_url,
            "ttl": timedelta(seconds=ttl_seconds), "label": label}  # fmt: skip
    reports, cpu = _clients(rows * processes if shared else rows, spec)
    return _summary(reports, cpu, label)


def _clients(rows: list, spec: dict) -> tuple[list[dict], tuple[int, int]]:
    """A forked client per row; their reports, and the machine's CPU while the first ran."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(rows) + 1)  # the clients and this process
    results = context.Queue()
    children = [
        context.Process(target=_client, args=(barrier, results, row.pk), kwargs=spec, daemon=True)
        for row in rows
    ]
    for child in children:
        child.start()
    barrier.wait(60)
    before = _cpu_times()
    reports = [results.get(timeout=spec["seconds"] + 90)]
    after = _cpu_times()  # the first client is done: the others end within a moment
    reports += [results.get(timeout=spec["seconds"] + 90) for _ in children[1:]]
    for child in children:
        child.join(30)
    return reports, (after[0] - before[0], after[1] - before[1])


def _summary(reports: list[dict], cpu: tuple[int, int], label: str) -> dict:
    def total(key: str, start=0):  # of the clients' reports: counts, or lists joined
        return sum((report[key] for report in reports), start)

    elapsed = max(report["elapsed"] for report in reports)
    successes, busy = total("successes"), total("busy")
    busy_us, wait_us = total("busy_us", []), total("wait_us", [])
    by_resource: dict[str, list] = {}
    for report in reports:
        by_resource.setdefault(report["resource"], []).extend(report["intervals"])
    overlaps = sum(_overlaps(intervals) for intervals in by_resource.values())
    with connection.cursor() as cursor:
        cursor.execute(TOKEN_ORDER_SQL, [label])
        logged, out_of_order = cursor.fetchone()
    top_client = max(report["successes"] for report in reports)
    metrics = {
        "ops_per_s": round(successes / elapsed, 1), "busy_per_s": round(busy / elapsed, 1),
        "stale": total("stale"),
        "top_client_share": round(top_client / successes, 2) if successes else 0,
        # Is the machine the limit? Both CPUs' busy share (every process); our CPU per success.
        "machine_cpu_busy": round(cpu[0] / max(cpu[1], 1), 2),
        "client_cpu_ms_per_op": round(1000 * total("cpu") / max(successes, 1), 2),
    }  # fmt: skip
    for name, samples, digits in (("loser", busy_us, 3), ("wait", wait_us, 2)):
        if samples:
            metrics[f"{name}_p50_ms"] = round(median(samples) / 1000, digits)
            metrics[f"{name}_p99_ms"] = round(percentile(samples, 99) / 1000, digits)
    sections = f"{successes} sections on {len(by_resource)} resource(s), {overlaps} overlaps"
    commits = f"{logged} commits, {out_of_order} resource(s) out of order"
    once = f"{successes} counted, {logged} logged"
    return result(
        busy_us,
        check("no overlapping critical sections", overlaps == 0, sections),
        check("committed tokens strictly increasing per resource", out_of_order == 0, commits),
        check("every counted success committed exactly once", logged == successes, once),
        metrics=metrics,
    )
