"""The history checker of the nemesis scenario (9): is every fenced write safe?

A pure function over two records of one run on one resource:

- **writes**, the history table in commit order. Every client inserts its row in the same
  transaction as ``advance_fence``, after the fence UPDATE took the fenced row's lock, so
  the table's ``bigserial`` id is the commit order (the next writer cannot pass its UPDATE
  before this one commits, and a stale writer inserts nothing);
- **attempts**, what each client logged about each of its operations: when it asked for
  the lease (``t_request``), when the grant came back (``t_granted``), the token, the
  outcome it was told (committed / stale / busy / unavailable / error) and when
  (``t_ack``).

All times are ``time.monotonic()`` of the client processes: CLOCK_MONOTONIC is one clock
for the whole machine on Linux, so times of different processes compare. ``t_request`` is
taken before the request is sent and ``t_granted`` after the grant arrives, so a pause
(SIGSTOP, a slow scheduler) can only make the checker miss a violation, never invent one.

The rules, each with the name a violation carries:

(a) ``stale-grant-won`` — in commit order, no write comes from a grant received before the
    grant request of a write already committed: for commit order i < j,
    ``t_granted[j] >= t_request[i]``. Otherwise j's grant happened before i's (real time),
    so j's token must be the smaller one and the fence had to refuse j after i: a paused
    older grant overwrote newer work. This is the promise of fencing; it is what a Redis
    counter reseeded *to* the recorded token (not above every token ever granted) breaks.
(b) ``acknowledged-write-lost`` — every write a client was told committed is in the
    history, once, with the token the client was told.
(c) ``token-not-rising`` — tokens rise strictly in commit order (what ``advance_fence``
    enforces row by row).
(d) ``unattempted-write`` — nothing is in the history that no client attempted, or that
    its client was told did not happen (stale, busy, unavailable), and nothing twice.
    An operation that ended in ``error`` (its answer is unknown) may or may not be there.
(e) ``fenced-mutex`` — Jepsen's fenced-mutex model, on what the clients were told: every
    acknowledged token is above every token acknowledged before its request began (for
    acknowledged operations i and j with ``t_ack[i] < t_request[j]``: ``token[j] >
    token[i]``). (c) reads the database; (e) reads only the clients' own answers, so an
    outside checker can apply it to the JSON history (``history_lines``) alone.

``history_lines`` turns the attempts into Jepsen's history shape, one JSON object per event:
``{"index", "process", "type": "invoke" | "ok" | "fail" | "info", "operation", "value",
"time"}`` (``operation`` is what Jepsen calls ``f``)
(``time`` in nanoseconds since the run began; ``ok`` carries the token, ``fail`` a refusal,
``info`` an unknown outcome).
"""

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

COMMITTED = "committed"
# Outcomes that promise nothing was written.
REFUSED = ("stale", "busy", "unavailable")
# The answer is unknown (a database error, say): the write may or may not be there.
UNKNOWN = ("error",)

STALE_GRANT_WON = "stale-grant-won"
ACKNOWLEDGED_WRITE_LOST = "acknowledged-write-lost"
TOKEN_NOT_RISING = "token-not-rising"
UNATTEMPTED_WRITE = "unattempted-write"
FENCED_MUTEX = "fenced-mutex"


@dataclass(frozen=True)
class Write:
    """One row of the history table: a committed fenced write."""

    seq: int  # the bigserial id: commit order
    client: int
    op: int
    token: int
    t_request: float
    t_granted: float

    def __str__(self) -> str:
        return f"write #{self.seq} (client {self.client} op {self.op}, token {self.token})"


@dataclass(frozen=True)
class ClientOp:
    """One operation as its client logged it."""

    client: int
    op: int
    outcome: str
    t_request: float
    t_ack: float
    token: int | None = None
    t_granted: float | None = None
    # Wall-clock times, for the report only (the rules use the monotonic ones).
    wall_request: float = 0.0
    wall_ack: float = 0.0

    def __str__(self) -> str:
        return f"client {self.client} op {self.op}"


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


@dataclass
class FenceHistoryReport:
    writes: int
    acknowledged: int
    attempts: int
    outcomes: dict[str, int]
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_rule(self) -> dict[str, int]:
        return dict(Counter(violation.rule for violation in self.violations))


def check_fence_history(
    writes: Iterable[Write], attempts: Iterable[ClientOp]
) -> FenceHistoryReport:
    """Check the committed ``writes`` against the clients' ``attempts``; see the rules above."""
    writes = sorted(writes, key=lambda write: write.seq)
    attempts = list(attempts)
    violations = (
        _stale_grants(writes)
        + _lost_acknowledgements(writes, attempts)
        + _tokens_not_rising(writes)
        + _unattempted(writes, attempts)
        + _fenced_mutex(attempts)
    )
    outcomes = Counter(attempt.outcome for attempt in attempts)
    return FenceHistoryReport(
        writes=len(writes),
        acknowledged=outcomes[COMMITTED],
        attempts=len(attempts),
        outcomes=dict(sorted(outcomes.items())),
        violations=violations,
    )


def _stale_grants(writes: Sequence[Write]) -> list[Violation]:
    """(a): t_granted[j] >= t_request[i] for every i committed before j."""
    found = []
    latest: Write | None = None  # the earlier write with the latest request so far
    for write in writes:
        if latest is not None and write.t_granted < latest.t_request:
            found.append(
                Violation(
                    STALE_GRANT_WON,
                    f"{write} committed after {latest}, but its grant arrived "
                    f"{latest.t_request - write.t_granted:.3f}s before that write's "
                    f"request: an older grant overwrote newer work",
                )
            )
        if latest is None or write.t_request > latest.t_request:
            latest = write
    return found


def _lost_acknowledgements(
    writes: Sequence[Write], attempts: Sequence[ClientOp]
) -> list[Violation]:
    """(b): every acknowledged write is in the history, with the token it was told."""
    stored: dict[tuple[int, int], Write] = {}
    for write in writes:
        stored.setdefault((write.client, write.op), write)  # a repeat is rule (d)'s
    found = []
    for attempt in attempts:
        if attempt.outcome != COMMITTED:
            continue
        write = stored.get((attempt.client, attempt.op))
        if write is None:
            found.append(
                Violation(
                    ACKNOWLEDGED_WRITE_LOST,
                    f"{attempt} was told committed (token {attempt.token}); no such write "
                    "in the history",
                )
            )
        elif write.token != attempt.token:
            found.append(
                Violation(
                    ACKNOWLEDGED_WRITE_LOST,
                    f"{attempt} was told committed with token {attempt.token}; the history "
                    f"has {write}",
                )
            )
    return found


def _tokens_not_rising(writes: Sequence[Write]) -> list[Violation]:
    """(c): tokens rise strictly in commit order."""
    return [
        Violation(TOKEN_NOT_RISING, f"{later} committed after {earlier}")
        for earlier, later in pairwise(writes)
        if later.token <= earlier.token
    ]


def _unattempted(writes: Sequence[Write], attempts: Sequence[ClientOp]) -> list[Violation]:
    """(d): every write was attempted, by a client not told it failed; none twice."""
    logged = {(attempt.client, attempt.op): attempt for attempt in attempts}
    seen: dict[tuple[int, int], Write] = {}
    found = []
    for write in writes:
        key = (write.client, write.op)
        attempt = logged.get(key)
        if key in seen:
            found.append(Violation(UNATTEMPTED_WRITE, f"{write} repeats {seen[key]}"))
        seen.setdefault(key, write)
        if attempt is None:
            found.append(Violation(UNATTEMPTED_WRITE, f"{write} was attempted by no client"))
        elif attempt.outcome in REFUSED:
            found.append(
                Violation(
                    UNATTEMPTED_WRITE,
                    f"{attempt} was told {attempt.outcome}, yet {write} is in the history",
                )
            )
    return found


def _fenced_mutex(attempts: Sequence[ClientOp]) -> list[Violation]:
    """(e): each acknowledged token is above every token acknowledged before its request."""
    acknowledged = [a for a in attempts if a.outcome == COMMITTED and a.token is not None]
    by_ack = sorted(acknowledged, key=lambda attempt: attempt.t_ack)
    found = []
    highest: ClientOp | None = None  # the highest token acknowledged so far
    position = 0
    for attempt in sorted(acknowledged, key=lambda attempt: attempt.t_request):
        while position < len(by_ack) and by_ack[position].t_ack < attempt.t_request:
            earlier = by_ack[position]
            if highest is None or earlier.token > highest.token:
                highest = earlier
            position += 1
        if highest is not None and attempt.token <= highest.token:
            found.append(
                Violation(
                    FENCED_MUTEX,
                    f"{attempt} was acknowledged token {attempt.token}, not above token "
                    f"{highest.token} that {highest} was acknowledged before it asked",
                )
            )
    return found


# Jepsen's completion types of this history's outcomes.
JEPSEN_TYPES = {COMMITTED: "ok", **dict.fromkeys(REFUSED, "fail"), **dict.fromkeys(UNKNOWN, "info")}


def history_lines(
    attempts: Iterable[ClientOp],
    *,
    resource: str,
    start: float,
    operation: str = "fenced-write",
    writes: Iterable[Write] = (),
) -> list[dict]:
    """The attempts as a Jepsen history: an invoke and a completion per operation.

    ``start`` is the monotonic moment the run began; events are ordered by time. Given the
    ``writes``, a completion whose write is in the history table also carries its commit
    position (``seq``), and every completion after a grant its time (``granted``, ns), so
    rule (a) can be checked from the file too.
    """
    seqs = {(write.client, write.op): write.seq for write in writes}
    events = []
    for attempt in attempts:
        process = f"client-{attempt.client}"
        value = {"resource": resource, "op": attempt.op}
        events.append((attempt.t_request, process, "invoke", value))
        done = {**value, "token": attempt.token, "outcome": attempt.outcome}
        if attempt.t_granted is not None and seqs:
            done["granted"] = round((attempt.t_granted - start) * 1e9)
        if (attempt.client, attempt.op) in seqs:
            done["seq"] = seqs[attempt.client, attempt.op]
        events.append((attempt.t_ack, process, JEPSEN_TYPES.get(attempt.outcome, "info"), done))
    events.sort(key=lambda event: event[0])
    return [
        {
            "index": index,
            "process": process,
            "type": kind,
            "operation": operation,
            "value": value,
            "time": round((moment - start) * 1e9),
        }
        for index, (moment, process, kind, value) in enumerate(events)
    ]


def fenced_mutex_from_lines(lines: Iterable[dict]) -> list[str]:
    """Rule (e) read from a JSON history alone (what an outside checker would do).

    Pairs each ``fenced-write`` completion with its ``invoke`` (same process, same op) and
    requires every ``ok`` token to be above every token whose ``ok`` came before that
    ``invoke``, per resource.
    """
    invoked: dict[tuple, int] = {}
    attempts: dict[str, list[ClientOp]] = {}
    for line in lines:
        if line.get("operation") != "fenced-write":
            continue
        value = line["value"]
        key = (line["process"], value["resource"], value["op"])
        if line["type"] == "invoke":
            invoked[key] = line["time"]
        elif line["type"] == "ok" and key in invoked:
            client = int(line["process"].rsplit("-", 1)[-1])
            attempts.setdefault(value["resource"], []).append(
                ClientOp(client, value["op"], COMMITTED, invoked[key], line["time"], value["token"])
            )
    return [
        f"{resource}: {violation}"
        for resource, found in sorted(attempts.items())
        for violation in _fenced_mutex(found)
    ]


def stale_grants_from_lines(lines: Iterable[dict]) -> list[str]:
    """Rule (a) read from a JSON history alone: in commit order (``seq``), no write's grant
    came before the request of a write committed earlier."""
    invoked: dict[tuple, int] = {}
    writes: dict[str, list[Write]] = {}
    for line in lines:
        if line.get("operation") != "fenced-write":
            continue
        value = line["value"]
        key = (line["process"], value["resource"], value["op"])
        if line["type"] == "invoke":
            invoked[key] = line["time"]
        elif "seq" in value and key in invoked:
            client = int(line["process"].rsplit("-", 1)[-1])
            t_request, t_granted = invoked[key] / 1e9, value["granted"] / 1e9  # ns -> s
            write = Write(value["seq"], client, value["op"], value["token"], t_request, t_granted)
            writes.setdefault(value["resource"], []).append(write)
    return [
        f"{resource}: {violation}"
        for resource, found in sorted(writes.items())
        for violation in _stale_grants(sorted(found, key=lambda write: write.seq))
    ]


def main(argv: Sequence[str]) -> int:
    """``python -m tests.faults.fence_history FILE.jsonl…``: rules (e) and (a) from the file."""
    import json

    status = 0
    for path in argv:
        with open(path, encoding="utf-8") as history:
            lines = [json.loads(line) for line in history if line.strip()]
        found = fenced_mutex_from_lines(lines) + stale_grants_from_lines(lines)
        oks = sum(
            1 for line in lines if line.get("operation") == "fenced-write" and line["type"] == "ok"
        )
        print(f"{path}: {len(lines)} events, {oks} acknowledged writes, {len(found)} violations")
        for line in found:
            print(f"  {line}")
        status = status or (1 if found else 0)
    return status


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
