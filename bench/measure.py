"""Counting and summarising: latency statistics, Redis commands, PostgreSQL round trips.

Counts are taken, not guessed (docs/benchmarks.md, "Counted, not guessed"): Redis
commands *executed* from ``INFO commandstats`` diffed around the timed loop (the bench
runs its own ``redis-server``); commands *sent* by the client from ``MONITOR`` during an
untimed pass (it tells a script's own calls, ``lua``, from the client's, ``tcp``);
PostgreSQL round trips from libpq's protocol trace, one per ``ReadyForQuery``.
"""

import math
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import redis

# Commands the measurement itself sends; never part of an operation's count.
_HARNESS_COMMANDS = {"info", "monitor", "echo", "hello", "client|setinfo", "config|resetstat"}
_MONITOR_END = "bench-monitor-end"


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: the smallest sample with at least ``pct`` % at or below it."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(pct / 100 * len(ordered))) - 1]


def check(name: str, ok: bool, detail: str) -> dict:
    """One invariant a case checked while it measured (a broken one fails the run)."""
    return {"name": name, "ok": bool(ok), "detail": detail}


def timed_loop(operation: Callable, items: Iterable) -> list[float]:
    """Run ``operation(item)`` for each item; return each call's time in µs."""
    samples = []
    for item in items:
        started = time.perf_counter_ns()
        operation(item)
        samples.append((time.perf_counter_ns() - started) / 1000)
    return samples


def commandstats(client: redis.Redis) -> Counter:
    """Return the server's per-command call counts."""
    stats = client.info("commandstats")
    return Counter(
        {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    )


def _per_op(calls: Counter, operations: int) -> dict[str, float]:
    return {
        name: round(count / operations, 3)
        for name, count in sorted(calls.items())
        if name not in _HARNESS_COMMANDS
    }


def executed_per_op(before: Counter, after: Counter, operations: int) -> dict[str, float]:
    """Per-operation call counts between two ``commandstats`` snapshots."""
    return _per_op(after - before, operations)


def _command_name(line: str) -> str:
    words = line.split()
    if not words:
        return ""
    name = words[0].lower()
    if name in {"script", "client", "config"} and len(words) > 1:
        name = f"{name}|{words[1].lower()}"
    return name


def sent_per_op(url: str, operation: Callable[[], object], operations: int) -> dict[str, float]:
    """Run ``operation`` ``operations`` times under MONITOR; return commands sent per run.

    Only commands a client sent count (MONITOR marks a script's own calls ``lua``).
    """
    seen: list[dict] = []
    ready = threading.Event()
    watcher = redis.Redis.from_url(url)

    def watch() -> None:
        with watcher.monitor() as monitor:
            ready.set()
            while (command := monitor.next_command())["command"] != f"ECHO {_MONITOR_END}":
                seen.append(command)

    thread = threading.Thread(target=watch, name="bench-monitor", daemon=True)
    thread.start()
    if not ready.wait(5):
        raise RuntimeError("MONITOR did not start")
    for _ in range(operations):
        operation()
    redis.Redis.from_url(url).echo(_MONITOR_END)
    thread.join(10)
    watcher.close()
    sent = Counter(_command_name(c["command"]) for c in seen if c.get("client_type") != "lua")
    return _per_op(sent, operations)


def _first_keyword(message: str, payload: str) -> str:
    """The SQL keyword of a traced ``Query "SQL"`` or ``Parse "name" "SQL" …`` message.

    libpq prints the SQL between quotes without escaping the quotes inside it (Django
    quotes identifiers), so take the text after the opening quote rather than split.
    """
    text = payload.strip()
    if message == "Parse":
        # Skip the statement name: the first quoted word (psycopg never quotes inside it).
        text = text[text.find('"', 1) + 1 :].lstrip()
    words = text[1:].split(None, 1)
    return words[0].rstrip('"').upper() if words else "?"


class PgRoundTrips:
    """Count PostgreSQL round trips and statements on one Django connection.

    Use it as a context manager in the thread that owns the connection. ``round_trips``
    is the number of ``ReadyForQuery`` messages the server sent; ``statements`` counts
    the statements by their first keyword (BEGIN, SELECT, UPDATE, INSERT, COMMIT, COPY…).
    If the block never opens the connection, both stay zero: no database work was done.
    """

    def __init__(self, connection):
        self.connection = connection
        self.round_trips = 0
        self.statements: Counter = Counter()

    def __enter__(self) -> "PgRoundTrips":
        import psycopg

        self.connection.ensure_connection()
        self._pgconn = self.connection.connection.pgconn
        handle, self._path = tempfile.mkstemp(prefix="hoa-bench-pgtrace-")
        os.close(handle)
        self._file = open(self._path, "w")
        self._pgconn.trace(self._file.fileno())
        self._pgconn.set_trace_flags(
            psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE
        )
        return self

    def __exit__(self, *exc_info) -> None:
        self._pgconn.untrace()
        self._file.close()
        with open(self._path) as trace:
            for line in trace:
                fields = line.rstrip("\n").split("\t")
                if len(fields) < 3:
                    continue
                direction, message = fields[0], fields[2]
                if direction == "B" and message == "ReadyForQuery":
                    self.round_trips += 1
                elif direction == "F" and message in {"Query", "Parse"} and len(fields) > 3:
                    self.statements[_first_keyword(message, fields[3])] += 1
        os.unlink(self._path)

    def per_op(self, operations: int) -> dict:
        return {
            "round_trips": round(self.round_trips / operations, 3),
            "statements": _per_op(self.statements, operations),
        }


def time_and_count(operation, items: list, warmup: int, ops: int, redis_url: str) -> tuple:
    """Run ``operation`` on ``warmup`` items, time it on ``ops`` more, count on the rest.

    Returns the samples and the counts per operation: Redis commands executed during the
    timed loop; of the items after it, half traced (PostgreSQL round trips and statements
    on Django's connection), half monitored (Redis commands sent).
    """
    from django.db import connection

    for item in items[:warmup]:
        operation(item)
    client = redis.Redis.from_url(redis_url)
    before = commandstats(client)
    samples = timed_loop(operation, items[warmup : warmup + ops])
    executed = executed_per_op(before, commandstats(client), ops)
    rest = items[warmup + ops :]
    counted = len(rest) // 2
    with PgRoundTrips(connection) as trips:
        for item in rest[:counted]:
            operation(item)
    monitored = iter(rest[counted:])
    sent = sent_per_op(redis_url, lambda: operation(next(monitored)), counted)
    per_op = trips.per_op(counted)
    counts = {
        "db_round_trips": per_op["round_trips"],
        "db_statements": per_op["statements"],
        "redis_sent": sent,
        "redis_sent_total": round(sum(sent.values()), 3),
        "redis_executed": executed,
    }
    return samples, counts
