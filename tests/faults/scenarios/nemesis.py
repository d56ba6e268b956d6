"""Scenario 9 (issue 15): a randomized nemesis against fenced writes, and a history checker.

The promise under test: a paused or slow holder can never overwrite work done after its
lease expired — also when Redis loses its data in between.

Clients: ``plan.clients`` (5) real processes (``tests/faults/nemesis_client.py``), each
with its own database connection, loop over fenced writes to one complaint row under one
lease (``nemesis:complaint:<id>``, TTL 500 ms) through ``locking`` alone: ``run_fenced``,
``advance_fence``, and a history row inserted in the same transaction. Each holds its
grant 80-200 ms before it writes: the window in which the nemesis freezes it.

The nemesis (this module), round after round, every choice drawn from one seeded RNG (the
seed is printed; ``--seed`` / ``FAULTS_SEED`` replays the schedule, not the timing):

1. freeze (SIGSTOP) the next client granted the lease, while its grant is unwritten;
2. freeze the next holder too (it is granted only once the first one's lease ran out),
   and at random a third;
3. wipe Redis: FLUSHALL, or SIGKILL the redis-server and start it again, empty, on the same
   port (it never persists: ``--save '' --appendonly no``);
4. wait for the first write committed after the wipe, by a client that was not frozen;
5. resume (SIGCONT) the frozen clients in random order, a few ms apart; wait until each has
   finished its operation, then let the clients run on their own for a random while.

Step 4 before step 5 makes the schedule sharp: the frozen grants were made before the loss
and never written, a newer holder writes after it, and only then do the older grants try
to commit. A counter that comes back at the token the database recorded (instead of above
every token ever granted) hands the frozen grants' numbers out again; the newer holder
writes the first frozen grant's number, and the second frozen grant, whose number is now
above it, commits after it: an older grant overwrote newer work.

Afterwards the history checker (``tests/faults/fence_history.py``) reads the history table
and every client's log; each violation it names fails the scenario.
"""

import json
import os
import queue
import random
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.faults.clients import Op
from tests.faults.fence_history import ClientOp, FenceHistoryReport, Write, check_fence_history
from tests.faults.nemesis_client import CREATE_HISTORY, HISTORY_TABLE
from tests.faults.scenario import Scenario, scenario
from tests.harness import HarnessError
from tests.harness.processes import freeze, stop_process, thaw
from tests.harness.waiting import wait_until

# How the suite's table reports each client outcome (tests/faults/clients.py's verdicts).
VERDICTS = {
    "committed": "done",
    "stale": "refused",
    "busy": "refused",
    "unavailable": "unavailable",
    "error": "error",
}
WIPES = ("flushall", "restart")


@dataclass(frozen=True)
class NemesisPlan:
    seed: int
    rounds: int = 12
    clients: int = 5
    ttl_ms: int = 500
    hold_ms: tuple[int, int] = (80, 200)
    # How long the clients run on their own between rounds, at most.
    quiet_seconds: float = 1.0

    @classmethod
    def from_env(cls, **overrides) -> "NemesisPlan":
        """``FAULTS_SEED`` (a fresh seed if unset) and ``FAULTS_NEMESIS_ROUNDS``."""
        seed = os.environ.get("FAULTS_SEED")
        rounds = os.environ.get("FAULTS_NEMESIS_ROUNDS")
        values = {"seed": int(seed) if seed else secrets.randbelow(1_000_000)}
        if rounds:
            values["rounds"] = int(rounds)
        return cls(**{**values, **overrides})


@dataclass
class NemesisCounts:
    rounds: int = 0
    pauses: int = 0
    flushall: int = 0
    restarts: int = 0
    # Rounds in which at least two frozen grants were still unwritten at the wipe and a
    # newer holder committed after the wipe before they were resumed.
    sharp_rounds: int = 0

    @property
    def wipes(self) -> int:
        return self.flushall + self.restarts


class _Clients:
    """The client processes, and their events on one queue."""

    def __init__(
        self, s: Scenario, plan, *, run: str, row: int, folder: Path, env: dict | None = None
    ):
        self.s = s
        self.env = env  # the clients' environment; default: the stack's
        self.plan = plan
        self.run = run
        self.row = row
        self.resource = f"nemesis:complaint:{row}"
        self.folder = folder
        self.events: queue.Queue = queue.Queue()
        self.processes: dict[int, subprocess.Popen] = {}
        self.logs: dict[int, Path] = {}
        self.finished: dict[int, int] = {}  # client -> its last operation that ended
        self.frozen: set[int] = set()
        self.stopping = False

    def start(self, rng: random.Random) -> None:
        """Start every client process; return once all are connected and looping."""
        env = self.env or self.s.stack.env()
        for client in range(self.plan.clients):
            self.logs[client] = self.folder / f"client-{client}.jsonl"
            stderr = (self.folder / f"client-{client}.err").open("wb")
            command = [sys.executable, "-m", "tests.faults.nemesis_client", f"--client={client}"]
            command += [f"--run={self.run}", f"--resource={self.resource}", f"--row={self.row}"]
            command += [f"--log={self.logs[client]}", f"--ttl-ms={self.plan.ttl_ms}"]
            command += ["--hold-ms", *(str(ms) for ms in self.plan.hold_ms)]
            tx_hold = getattr(self.plan, "tx_hold_ms", (0, 0))
            command += ["--tx-hold-ms", *(str(ms) for ms in tx_hold)]
            command += [f"--seed={rng.randrange(2**32)}"]
            # Reaped by the stack, whatever happens.
            process = self.s.stack.start(command, env=env, stdin=subprocess.PIPE, stderr=stderr)
            stderr.close()
            self.processes[client] = process
            self.finished[client] = 0
            threading.Thread(
                target=self._read, args=(client, process), name=f"nemesis-{client}", daemon=True
            ).start()
        ready: set[int] = set()
        while len(ready) < self.plan.clients:
            event = self.next("ready", timeout=90)
            if event is None:
                raise HarnessError(f"only {len(ready)} of {self.plan.clients} clients started")
            ready.add(event["client"])

    def _read(self, client: int, process: subprocess.Popen) -> None:
        for line in process.stdout:
            with suppress(ValueError):
                event = json.loads(line)
                if event["event"] == "done":
                    self.finished[client] = event["op"]
                self.events.put(event)
        self.events.put({"event": "exit", "client": client})

    def next(self, kind: str, *, timeout: float, where=lambda event: True) -> dict | None:
        """The next event of ``kind`` that ``where`` accepts (others are dropped), or None."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                return None
            if event["event"] == "exit" and not self.stopping:
                raise HarnessError(f"nemesis client {event['client']} exited: {self._err(event)}")
            if event["event"] == kind and where(event):
                return event
        return None

    def _err(self, event) -> str:
        path = self.folder / f"client-{event['client']}.err"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""

    def pid(self, client: int) -> int:
        return self.processes[client].pid

    def freeze(self, client: int) -> None:
        self.frozen.add(client)
        freeze(self.pid(client))

    def thaw(self, client: int) -> None:
        thaw(self.pid(client))
        self.frozen.discard(client)

    def stop(self) -> None:
        """Resume every frozen client, ask all to stop after their operation, reap them."""
        self.stopping = True
        for client in list(self.frozen):
            self.thaw(client)
        for process in self.processes.values():
            with suppress(OSError):
                process.stdin.close()
        deadline = time.monotonic() + 20
        for process in self.processes.values():
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                stop_process(process, timeout=2, group=True)


@scenario(
    "9-nemesis",
    group=9,
    title="Randomized nemesis: holders frozen past their lease, Redis wiped, then resumed",
    expected="no write from a grant older than a committed write's request; every "
    "acknowledged write in the history; tokens rise in commit order; nothing no client "
    "attempted",
    show_observed=True,
)
def nemesis(s: Scenario) -> None:
    play(s, NemesisPlan.from_env())


def play(s: Scenario, plan: NemesisPlan) -> FenceHistoryReport:
    """Run ``plan`` against the scenario's stack; record counts, facts and violations."""
    from django.db import connection

    rng = random.Random(plan.seed)
    print(f" seed {plan.seed}", end="", flush=True)  # before anything can go wrong
    row = s.complaint()
    run = f"{s.spec.key}-{secrets.token_hex(6)}"
    with connection.cursor() as cursor:
        cursor.execute(CREATE_HISTORY)
    counts = NemesisCounts()
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="hoa-faults-nemesis-") as name:
        clients = _Clients(s, plan, run=run, row=row, folder=Path(name))
        s.fact("plan", {**asdict(plan), "resource": clients.resource, "run": run})
        try:
            clients.start(rng)
            for _ in range(plan.rounds):
                rounds.append(_round(s, plan, rng, clients, counts))
        finally:
            clients.stop()
        attempts = _read_logs(clients.logs.values())
    writes = _read_history(run)
    report = check_fence_history(writes, attempts)
    _record(s, plan, counts, rounds, report, attempts, row)
    return report


def _round(s: Scenario, plan: NemesisPlan, rng, clients: _Clients, counts) -> dict:
    fresh_for = plan.hold_ms[0] / 2000  # a grant this recent is certainly not written yet
    frozen: list[dict] = []
    wait = plan.ttl_ms / 1000 * 4 + 10
    for _ in range(min(rng.choice((2, 2, 3)), plan.clients - 1)):
        grant = clients.next(
            "granted",
            timeout=wait,
            where=lambda event: (
                event["client"] not in clients.frozen and time.monotonic() - event["t"] < fresh_for
            ),
        )
        if grant is None:
            raise HarnessError(f"no client was granted the lease for {wait:g} s")
        clients.freeze(grant["client"])
        counts.pauses += 1
        frozen.append(grant)
    unwritten = _unwritten(clients.run, frozen)
    wipe = rng.choice(WIPES)
    wiped_at = time.monotonic()
    if wipe == "flushall":
        s.stack.redis().flushall()
        counts.flushall += 1
    else:
        s.stack.redis_server.restart_empty()
        counts.restarts += 1
    newer = clients.next(
        "committed",
        timeout=10,
        where=lambda event: event["t"] > wiped_at and event["client"] not in clients.frozen,
    )
    order = [grant["client"] for grant in frozen]
    rng.shuffle(order)
    for client in order:
        clients.thaw(client)
        time.sleep(rng.uniform(0, 0.02))
    for grant in frozen:
        wait_until(
            lambda grant=grant: clients.finished[grant["client"]] >= grant["op"],
            timeout=15,
            what=f"client {grant['client']} to finish op {grant['op']} after it was resumed",
        )
    counts.rounds += 1
    if unwritten >= 2 and newer is not None:
        counts.sharp_rounds += 1
    time.sleep(rng.uniform(0, plan.quiet_seconds))
    return {
        "frozen": [(grant["client"], grant["op"], grant["token"]) for grant in frozen],
        "unwritten at the wipe": unwritten,
        "wipe": wipe,
        "first write after the wipe": (newer["client"], newer["op"], newer["token"])
        if newer
        else None,
        "resumed": order,
    }


def _unwritten(run: str, grants: list[dict]) -> int:
    """How many of the frozen grants' operations have no history row (yet)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT client, op FROM {HISTORY_TABLE} WHERE run = %s",  # noqa: S608
            [run],
        )
        written = set(cursor.fetchall())
    return sum((grant["client"], grant["op"]) not in written for grant in grants)


def _read_history(run: str) -> list[Write]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, client, op, token, t_request, t_granted FROM {HISTORY_TABLE} "  # noqa: S608
            "WHERE run = %s ORDER BY id",
            [run],
        )
        return [Write(*row) for row in cursor.fetchall()]


def _read_logs(paths) -> list[ClientOp]:
    attempts = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            attempts.append(
                ClientOp(
                    client=entry["client"],
                    op=entry["op"],
                    outcome=entry["outcome"],
                    t_request=entry["t_request"],
                    t_ack=entry["t_ack"],
                    token=entry["token"],
                    t_granted=entry["t_granted"],
                    wall_request=entry["wall_request"],
                    wall_ack=entry["wall_ack"],
                )
            )
    return attempts


def _record(s: Scenario, plan, counts, rounds, report: FenceHistoryReport, attempts, row) -> None:
    for attempt in attempts:
        s.history.add(
            Op(
                kind="nemesis",
                org="",
                org_id=0,
                client=f"nemesis-{attempt.client}",
                user=f"nemesis-{attempt.client}",
                via="process",
                complaint=row,
                started=attempt.wall_request,
                ended=attempt.wall_ack,
                verdict=VERDICTS.get(attempt.outcome, "error"),
                detail=f"op {attempt.op}: {attempt.outcome}, token {attempt.token}",
            )
        )
    s.violations.extend(str(violation) for violation in report.violations)
    summary = {
        "seed": plan.seed,
        "rounds": counts.rounds,
        "sharp rounds": counts.sharp_rounds,
        "writes": report.writes,
        "acknowledged": report.acknowledged,
        "attempts": report.attempts,
        "outcomes": report.outcomes,
        "pauses": counts.pauses,
        "flushall": counts.flushall,
        "restarts": counts.restarts,
        "wipes": counts.wipes,
        "violations": len(report.violations),
        "violations by rule": report.by_rule(),
    }
    for name, value in summary.items():
        s.fact(name, value)
    s.fact("schedule", rounds[:30])
    s.observe(
        f"seed {plan.seed}: {counts.rounds} rounds ({counts.sharp_rounds} sharp), "
        f"{report.writes} writes ({report.acknowledged} acknowledged of {report.attempts} "
        f"attempts), {counts.pauses} pauses, {counts.flushall} FLUSHALL + {counts.restarts} "
        f"restarts, {len(report.violations)} violations"
    )
