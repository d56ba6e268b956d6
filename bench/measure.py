"""Counting and summarising: latencies, Redis commands (``INFO commandstats``, ``MONITOR``),
PostgreSQL round trips (libpq's trace); docs/benchmarks.md, "Counted, not guessed"."""

import math
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import redis
from psycopg.pq import Trace

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


def result(samples_us: list[float], *invariants: dict, metrics=None, counts=None) -> dict:
    return {"samples_us": samples_us, "metrics": metrics or {}, "counts": counts or {},
            "invariants": list(invariants)}  # fmt: skip


def since_us(started_ns: int) -> float:
    return (time.perf_counter_ns() - started_ns) / 1000


def timed_loop(operation: Callable, items: Iterable, warmup: int = 0) -> list[float]:
    """``operation(item)`` for each item: each call's µs, the first ``warmup`` left out."""
    samples = []
    for item in items:
        started = time.perf_counter_ns()
        operation(item)
        samples.append(since_us(started))
    return samples[warmup:]


def redis_timed(operation: Callable, items: Sequence, url: str, warmup: int = 0) -> tuple:
    """``timed_loop``, and the commands the Redis server executed per timed call."""
    client = redis.Redis.from_url(url)
    timed_loop(operation, items[:warmup])
    before = commandstats(client)
    samples = timed_loop(operation, items[warmup:])
    return samples, {"redis_executed": per_op(commandstats(client) - before, len(samples))}


def commandstats(client: redis.Redis) -> Counter:  # the server's calls per command
    stats = client.info("commandstats").items()
    return Counter({name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats})


def per_op(calls: Counter, operations: int) -> dict[str, float]:
    """Calls per operation, by command or statement, without the harness's own commands."""
    kept = (item for item in sorted(calls.items()) if item[0] not in _HARNESS_COMMANDS)
    return {name: round(count / operations, 3) for name, count in kept}


def _command_name(line: str) -> str:
    words = line.lower().split()[:2] or [""]
    return "|".join(words) if words[0] in {"script", "client", "config"} else words[0]


def sent_per_op(url: str, operation: Callable[[], object], operations: int) -> dict:
    """Run ``operation`` under MONITOR: the commands a client sent per run (not ``lua``)."""
    seen: list[dict] = []
    ready, watcher = threading.Event(), redis.Redis.from_url(url)

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
    by_command = per_op(sent, operations)
    return {"redis_sent": by_command, "redis_sent_total": round(sum(by_command.values()), 3)}


def _first_keyword(message: str, payload: str) -> str:
    """The SQL keyword of a traced ``Query "SQL"`` or ``Parse "name" "SQL" …`` message."""
    text = payload.strip()
    if message == "Parse":
        text = text[text.find('"', 1) + 1 :].lstrip()
    words = text[1:].split(None, 1)
    return words[0].rstrip('"').upper() if words else "?"


class PgRoundTrips:
    """PostgreSQL round trips and statements (by keyword) on one Django connection, its thread's."""

    def __init__(self, connection):
        self.connection, self.round_trips, self.statements = connection, 0, Counter()

    def __enter__(self) -> "PgRoundTrips":
        self.connection.ensure_connection()
        self._pgconn = self.connection.connection.pgconn
        self._file = tempfile.NamedTemporaryFile("w+", prefix="hoa-bench-pgtrace-")
        self._pgconn.trace(self._file.fileno())
        self._pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        return self

    def __exit__(self, *exc_info) -> None:
        self._pgconn.untrace()
        with self._file as trace:
            trace.seek(0)
            for line in trace:
                fields = line.rstrip("\n").split("\t")
                if len(fields) < 3:
                    continue
                direction, message = fields[0], fields[2]
                if direction == "B" and message == "ReadyForQuery":
                    self.round_trips += 1
                elif direction == "F" and message in {"Query", "Parse"} and len(fields) > 3:
                    self.statements[_first_keyword(message, fields[3])] += 1


def time_and_count(operation, items: list, warmup: int, ops: int, redis_url: str) -> tuple:
    """Warm up, time ``ops`` (Redis commands counted), trace PostgreSQL and MONITOR the rest."""
    from django.db import connection

    samples, counts = redis_timed(operation, items[: warmup + ops], redis_url, warmup)
    rest = items[warmup + ops :]
    counted = len(rest) // 2
    with PgRoundTrips(connection) as trips:
        for item in rest[:counted]:
            operation(item)
    monitored = iter(rest[counted:])
    counts.update(sent_per_op(redis_url, lambda: operation(next(monitored)), counted))
    statements, round_trips = per_op(trips.statements, counted), trips.round_trips / counted
    counts.update(db_round_trips=round(round_trips, 3), db_statements=statements)
    return samples, counts


class Poller:
    """``sample()`` at ``start()`` and every ``every`` s after, in a thread, until ``stop()``."""

    every = 0.1

    def __init__(self):
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self):
        self._thread.start()
        return self

    __enter__ = start

    def stop(self, *exc) -> None:
        self._done.set()
        if self._thread.ident is not None:
            self._thread.join(30)

    __exit__ = stop

    def _poll(self) -> None:
        self.sample()
        while not self._done.wait(self.every):
            self.sample()


class PeakMemory(Poller):
    """The largest peak RSS (``VmHWM``) under ``root``, from /proc (docs/benchmarks.md: why)."""

    def __init__(self, root: int, every: float = 0.1):
        super().__init__()
        self.root, self.every = root, every
        self._last: dict[int, int] = {}  # pid -> its last VmHWM (kB)

    @property
    def mb(self) -> float:
        return round(max(self._last.values(), default=0) / 1024, 1)

    def sample(self) -> None:
        level = _children(self.root)
        while level:  # the tree, level by level
            for pid in level:
                if kb := _high_water_kb(pid):
                    self._last[pid] = kb
            level = [child for pid in level for child in _children(pid)]


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return [int(child) for task in tasks for child in (task / "children").read_text().split()]
    except OSError:  # ended meanwhile
        return []


def _high_water_kb(pid: int) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:  # ended meanwhile
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith("VmHWM:")), 0)
