"""Counting and summarising: latency statistics, Redis commands, PostgreSQL round trips.

Counts are taken, not guessed:

- Redis commands *executed* come from ``INFO commandstats`` diffed around the timed loop.
  The bench runs its own ``redis-server``, so nothing else adds to the server-wide stats.
  Commands run inside a Lua script are counted there too (``SET`` inside ``EVALSHA``).
- Redis commands *sent* by the client (one round trip each, none of these clients
  pipelines) come from ``MONITOR`` during a short, untimed counting pass: it names every
  command with its origin, ``tcp`` for the client and ``lua`` for a script's own calls.
- PostgreSQL round trips come from libpq's protocol trace (``PQtrace``) on the Django
  connection during an untimed counting pass: every exchange ends with the server's
  ``ReadyForQuery``, so counting those counts round trips, ``BEGIN`` and ``COMMIT``
  included, which a cursor wrapper would not see.
"""

import math
import os
import statistics
import tempfile
import threading
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
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def commandstats(client: redis.Redis) -> Counter:
    """Return the server's per-command call counts."""
    stats = client.info("commandstats")
    return Counter(
        {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    )


def executed_per_op(before: Counter, after: Counter, operations: int) -> dict[str, float]:
    """Per-operation call counts between two ``commandstats`` snapshots."""
    diff = after - before
    return {
        name: round(calls / operations, 3)
        for name, calls in sorted(diff.items())
        if name not in _HARNESS_COMMANDS
    }


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
            while True:
                command = monitor.next_command()
                if command["command"] == f"ECHO {_MONITOR_END}":
                    return
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
    sent = Counter(
        _command_name(command["command"]) for command in seen if command.get("client_type") != "lua"
    )
    return {
        name: round(calls / operations, 3)
        for name, calls in sorted(sent.items())
        if name not in _HARNESS_COMMANDS
    }


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
        self._file = None
        self._pgconn = None

    def __enter__(self) -> "PgRoundTrips":
        import psycopg

        self.connection.ensure_connection()
        self._pgconn = self.connection.connection.pgconn
        handle, path = tempfile.mkstemp(prefix="hoa-bench-pgtrace-")
        os.close(handle)
        self._path = path
        self._file = open(path, "w")
        self._pgconn.trace(self._file.fileno())
        self._pgconn.set_trace_flags(
            psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE
        )
        return self

    def __exit__(self, *exc_info) -> None:
        self._pgconn.untrace()
        self._file.close()
        with open(self._path) as trace:
            self._parse(trace)
        os.unlink(self._path)

    def _parse(self, lines: Iterable[str]) -> None:
        for line in lines:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3:
                continue
            direction, message = fields[0], fields[2]
            if direction == "B" and message == "ReadyForQuery":
                self.round_trips += 1
            elif direction == "F" and message in {"Query", "Parse"} and len(fields) > 3:
                self.statements[_first_keyword(message, fields[3])] += 1

    def per_op(self, operations: int) -> dict:
        return {
            "round_trips": round(self.round_trips / operations, 3),
            "statements": {
                name: round(count / operations, 3)
                for name, count in sorted(self.statements.items())
            },
        }
