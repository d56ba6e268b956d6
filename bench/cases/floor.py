"""Section 1e: one fenced write against the same write in Django's ``atomic()`` and against the
floor's parts, with two probes: step by step, and fused (docs/benchmarks.md)."""

import itertools
import time
from functools import partial
from statistics import median

import redis
from django.db import connection, transaction
from django.utils import timezone

from bench import fixtures
from bench.fixtures import TTL
from bench.measure import PgRoundTrips, check, result
from hoa.models import Complaint, ComplaintEvent
from locking import FenceLock, advance_fence, run_fenced
from locking.audit import Attempt

FLOOR_TABLE = "bench_floor_commit"  # the durable commit's one-row table (bench only)
FLOOR_DDL = f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id bigserial PRIMARY KEY, at timestamptz)"
FLOOR_INSERT = f"INSERT INTO {FLOOR_TABLE} (at) VALUES (now())"  # noqa: S608 - a constant
STEPS = ("grant", "fence", "row", "audit", "commit", "release")
FUSED_STEPS = ("grant", "fence_and_audit", "row", "commit", "release")
# The fence UPDATE (row check, epoch check) and the committed audit row, as locking's own
# INSERT writes it, in one statement.
FUSED_SQL = """
WITH fenced AS (
    UPDATE hoa_complaint SET last_fence_token = %s
    WHERE id = %s AND last_fence_token < %s
      AND NOT EXISTS (SELECT 1 FROM locking_fenceepoch WHERE resource = %s AND epoch > %s)
    RETURNING 1)
INSERT INTO locking_fenceevent (resource, scope, operation, token, outcome, actor, detail, at)
SELECT %s, %s, %s, %s, %s, %s, %s, %s FROM fenced
"""


_ns = time.perf_counter_ns


def _given_token(write):
    return lambda lease: write(lease.token)


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
        self.fused_steps: dict[str, list[float]] = {step: [] for step in FUSED_STEPS}
        self.unfenced = itertools.count(1)  # the Django write's audit rows: a number each

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

    def _audit(self, token: int) -> None:
        from locking.audit import _write_event  # a harness: the audit row as run_fenced writes it

        _write_event(resource=self.resource, outcome="committed", token=token,
                     attempt=self.attempt, using="default")  # fmt: skip

    def _clocked(self, steps: dict, *inside) -> float:
        """Grant, ``inside`` (each given the lease) in ``atomic()``, commit, release: each µs."""
        marks = [_ns()]
        lease = self.lock.acquire(self.resource, ttl=TTL)
        marks.append(_ns())
        with transaction.atomic():
            for step in inside:
                step(lease)
                marks.append(_ns())
        marks.append(_ns())
        lease.release()
        marks.append(_ns())
        for step, (start, end) in zip(steps, itertools.pairwise(marks), strict=True):
            steps[step].append((end - start) / 1000)
        return (marks[-1] - marks[0]) / 1000

    def timed_steps(self) -> float:
        """The same write with a clock between its steps (no audit span, no metrics)."""
        row, audit = _given_token(self._row), _given_token(self._audit)
        return self._clocked(self.steps, partial(advance_fence, self.rows), row, audit)

    def django_write(self) -> int:
        """The same row and audit row in Django's ``atomic()``: no lease, no fence."""
        number = next(self.unfenced)
        with transaction.atomic():
            self._row(number)
            self._audit(number)
        return number

    def fused(self) -> float:
        """``timed_steps`` with the fence UPDATE and the audit row as one statement."""
        return self._clocked(self.fused_steps, self._fence_and_audit, _given_token(self._row))

    def _fence_and_audit(self, lease) -> None:
        token, attempt = lease.token, self.attempt
        with connection.cursor() as cursor:
            cursor.execute(
                FUSED_SQL,
                [token, self.complaint.pk, token, self.resource, token >> 32, self.resource,
                 attempt.scope, attempt.operation, token, "committed", attempt.actor, "",
                 timezone.now()],
            )  # fmt: skip
            if cursor.rowcount != 1:
                raise RuntimeError(f"the fused fence refused token {token}")


def run(*, variant: str = "fenced", redis_url: str, ops: int, warmup: int = 30) -> dict:
    client = redis.Redis.from_url(redis_url)
    connection.ensure_connection()
    raw = connection.connection  # psycopg's own, autocommit (Django's default)
    raw.execute("SET synchronous_commit = on")
    raw.execute(FLOOR_DDL)
    write = _FencedWrite(client)
    floor_ops = {
        "ping": client.ping, "select1": lambda: raw.execute("SELECT 1"),
        "commit": lambda: raw.execute(FLOOR_INSERT), "fenced": write,
        "steps": write.timed_steps, "django": write.django_write, "fused": write.fused,
    }  # fmt: skip
    samples: dict[str, list[float]] = {name: [] for name in floor_ops}
    tokens = []
    for round_number in range(warmup + ops):
        for name, operation in floor_ops.items():
            started = _ns()
            returned = operation()
            if round_number >= warmup:
                samples[name].append((_ns() - started) / 1000)
                if name == "fenced":
                    tokens.append(returned)
    trips = {}
    for name in ("fenced", "django", "fused"):
        with PgRoundTrips(connection) as trips[name]:
            floor_ops[name]()
    rising = all(a < b for a, b in itertools.pairwise(tokens))
    events = ComplaintEvent.objects.filter(complaint=write.complaint).count()
    # The fenced writes, the timed steps, the Django writes and the fused probe; and one
    # more of each but the steps, counted.
    written = 4 * (warmup + ops) + 3
    detail = f"{len(tokens)} tokens rising: {rising}; {events} of {written} rows"
    ok = rising and events == written
    invariant = check("every fenced write committed once, tokens rising", ok, detail)
    return result(samples["fenced"], invariant, metrics=_metrics(samples, write, trips),
                  counts={"db_round_trips": trips["fenced"].round_trips})  # fmt: skip


def _metrics(samples: dict, write: _FencedWrite, trips: dict) -> dict:
    m = {name: median(values) for name, values in samples.items()}
    floor_us = 2 * m["ping"] + m["select1"] + m["commit"]
    # Paired per round: what fusing the fence and the audit row saves over the steps.
    saved = [a - b for a, b in zip(samples["steps"], samples["fused"], strict=True)]
    return {
        "ping_us": round(m["ping"], 1), "select1_us": round(m["select1"], 1),
        "commit_us": round(m["commit"], 1), "floor_us": round(floor_us, 1),
        "fenced_us": round(m["fenced"], 1), "floor_multiple": round(m["fenced"] / floor_us, 3),
        "django_us": round(m["django"], 1),
        "django_multiple": round(m["fenced"] / m["django"], 3),
        "steps_us": {step: round(median(v), 1) for step, v in write.steps.items() if v},
        "steps_total_us": round(m["steps"], 1),
        "fused_steps_us": {step: round(median(v), 1) for step, v in write.fused_steps.items() if v},
        "fused_total_us": round(m["fused"], 1), "fused_saves_us": round(median(saved), 1),
        **{f"{name}_db_round_trips": each.round_trips for name, each in trips.items()},
    }  # fmt: skip
