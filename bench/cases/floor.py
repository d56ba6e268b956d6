"""Section 1e: the physical floor of a fenced write, and one fenced write measured against it.

The floor is what the hardware asks of any fenced write: 2 Redis round trips (grant and
release), 1 PostgreSQL round trip (the fence UPDATE) and 1 durable commit (the row and its
audit row, ``synchronous_commit`` on). Each is measured bare in the same process, round
robin with the fenced write itself, so that load on the shared machine shifts all of them
together: ``PING``, ``SELECT 1`` and a one-row ``INSERT`` in autocommit (one round trip that
waits for the WAL flush). The fenced write is one ``run_fenced`` call: grant, fence UPDATE,
one row, the audit row, commit, release.

``steps`` times the same write step by step (grant, BEGIN + fence UPDATE, row, audit row,
COMMIT, release, and what is left: Python) to say where the time above the floor goes.
"""

import itertools
import time
from datetime import timedelta
from statistics import median

import redis
from django.db import connection, transaction

from bench import fixtures
from bench.measure import PgRoundTrips, check, result
from hoa.models import Complaint, ComplaintEvent
from locking import Attempt, FenceLock, advance_fence, run_fenced

TTL = timedelta(seconds=30)
FLOOR_TABLE = "bench_floor_commit"  # the durable commit's one-row table (bench only)
FLOOR_INSERT = f"INSERT INTO {FLOOR_TABLE} (at) VALUES (now())"  # noqa: S608 - a constant
STEPS = ("grant", "fence", "row", "audit", "commit", "release")


def _ns() -> int:
    return time.perf_counter_ns()


class _FencedWrite:
    """One complaint: each write fences its row and adds one note, the audit row with it."""

    def __init__(self, client: redis.Redis):
        org = fixtures.organization("bench-floor")
        [self.complaint] = fixtures.complaints(org, 1, title=fixtures.unique_label("floor"))
        self.resource = f"bench-floor:complaint:{self.complaint.pk}"
        self.rows = Complaint.objects.filter(pk=self.complaint.pk)
        self.lock = FenceLock(client, using="default", min_replicas=0)
        self.attempt = Attempt(actor="bench", operation="bench-floor")
        self.steps: dict[str, list[float]] = {step: [] for step in STEPS}

    def _row(self, token: int) -> None:
        ComplaintEvent.objects.create(
            complaint=self.complaint, kind=ComplaintEvent.Kind.NOTE, detail=f"token {token}"
        )

    def _work(self, lease) -> int:
        with transaction.atomic():
            advance_fence(self.rows, lease)
            self._row(lease.token)
            lease.record_committed()
        return lease.token

    def __call__(self) -> int:
        return run_fenced(self.resource, self._work, ttl=TTL, attempt=self.attempt, lock=self.lock)

    def timed_steps(self) -> float:
        """The same write with a clock between its steps (no audit span, no metrics)."""
        from locking.audit import _write_event  # a harness: the audit row as run_fenced writes it

        marks = [_ns()]
        lease = self.lock.acquire(self.resource, ttl=TTL)
        marks.append(_ns())
        with transaction.atomic():
            advance_fence(self.rows, lease)
            marks.append(_ns())
            self._row(lease.token)
            marks.append(_ns())
            _write_event(
                resource=self.resource, outcome="committed", token=lease.token,
                attempt=self.attempt, using="default",
            )  # fmt: skip
            marks.append(_ns())
        marks.append(_ns())
        lease.release()
        marks.append(_ns())
        for step, (start, end) in zip(STEPS, itertools.pairwise(marks), strict=True):
            self.steps[step].append((end - start) / 1000)
        return (marks[-1] - marks[0]) / 1000


def run(*, variant: str = "fenced", redis_url: str, ops: int, warmup: int = 30) -> dict:
    """Time ``ops`` rounds of PING, SELECT 1, a durable one-row commit and a fenced write."""
    client = redis.Redis.from_url(redis_url)
    connection.ensure_connection()
    raw = connection.connection  # psycopg's own, autocommit (Django's default)
    raw.execute("SET synchronous_commit = on")
    raw.execute(
        f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id bigserial PRIMARY KEY, at timestamptz)"
    )
    write = _FencedWrite(client)
    floor_ops = {
        "ping": client.ping,
        "select1": lambda: raw.execute("SELECT 1"),
        "commit": lambda: raw.execute(FLOOR_INSERT),
        "fenced": write,
        "steps": write.timed_steps,
    }
    samples: dict[str, list[float]] = {name: [] for name in floor_ops}
    tokens = []
    for round_number in range(warmup + ops):
        for name, operation in floor_ops.items():
            started = _ns()
            returned = operation()
            elapsed = (_ns() - started) / 1000
            if round_number >= warmup:
                samples[name].append(elapsed)
                if name == "fenced":
                    tokens.append(returned)
    with PgRoundTrips(connection) as trips:
        write()
    m = {name: median(values) for name, values in samples.items()}
    floor_us = 2 * m["ping"] + m["select1"] + m["commit"]
    steps = {step: round(median(values), 1) for step, values in write.steps.items() if values}
    metrics = {
        "ping_us": round(m["ping"], 1), "select1_us": round(m["select1"], 1),
        "commit_us": round(m["commit"], 1), "floor_us": round(floor_us, 1),
        "fenced_us": round(m["fenced"], 1), "floor_multiple": round(m["fenced"] / floor_us, 3),
        "steps_us": steps, "steps_total_us": round(m["steps"], 1),
        "fenced_db_round_trips": trips.round_trips,
    }  # fmt: skip
    rising = all(a < b for a, b in itertools.pairwise(tokens))
    events = ComplaintEvent.objects.filter(complaint=write.complaint).count()
    written = 2 * (warmup + ops) + 1  # the fenced writes and the timed steps
    ok = rising and events == written
    detail = f"{len(tokens)} tokens rising: {rising}; {events} of {written} rows"
    invariant = check("every fenced write committed once, tokens rising", ok, detail)
    return result(
        samples["fenced"], invariant, metrics=metrics, counts={"db_round_trips": trips.round_trips}
    )
