"""Scenario 8: load with random pauses, then the history checker over everything.

``FAULTS_CLIENTS`` staff clients (16) spread over both app instances, plus one cron
loop running the management commands, hammer charge generation and vendor assignment
for ``FAULTS_LOAD_SECONDS`` (60; 20 with ``--quick``). Most requests go to a few hot
resources (contention), the rest to many cold ones. Meanwhile a chaos thread freezes a
gunicorn worker with SIGSTOP for 0.3-3 s, again and again; most of the time it is the
next worker granted a lease on a hot resource, frozen right after the grant and past its
1 s TTL, so that others take over meanwhile. The stand-in takes 150 ms per external call,
as a real one would. Every request and its answer is recorded; the checker then compares
the whole history with the database.
"""

import os
import random
import signal
import threading
import time
from collections import Counter
from contextlib import suppress

from tests.faults.clients import run_command
from tests.faults.scenario import MAPLE, OAK, Scenario, grant_pid, scenario
from tests.harness import HarnessError
from tests.harness.processes import process_state

HOT_SHARE = 0.6
EXTERNAL_CALL_SECONDS = 0.15


class _Workload:
    """Which resource the next request goes to."""

    def __init__(self, s: Scenario, rng: random.Random):
        self.s = s
        self.rng = rng
        self.hot_months = {org: [s.month(org)] for org in (MAPLE, OAK)}
        self.cold_months = {org: [s.month(org) for _ in range(200)] for org in (MAPLE, OAK)}
        self.hot_complaints = {org: [s.complaint(org) for _ in range(2)] for org in (MAPLE, OAK)}
        self.cold_complaints = {MAPLE: [s.complaint(MAPLE) for _ in range(120)]}
        self.cold_complaints[OAK] = [s.complaint(OAK) for _ in range(40)]
        self.hot = [
            s.charges(org, month=m).resource for org in (MAPLE, OAK) for m in self.hot_months[org]
        ]
        self.hot += [
            s.assign(c, 0).resource for org in (MAPLE, OAK) for c in self.hot_complaints[org]
        ]
        self._lock = threading.Lock()

    def next_op(self):
        with self._lock:
            rng = self.rng
            org = MAPLE if rng.random() < 0.7 else OAK
            hot = rng.random() < HOT_SHARE
            if rng.random() < 0.5:
                months = self.hot_months[org] if hot else self.cold_months[org]
                return self.s.charges(org, month=rng.choice(months))
            complaints = self.hot_complaints[org] if hot else self.cold_complaints[org]
            return self.s.assign(
                rng.choice(complaints),
                rng.choice(self.s.world.vendors),
                reassign=rng.random() < (0.4 if hot else 0.1),
                org=org,
            )


class _Window:
    """How long the load runs: until the deadline, or until the scenario is stopped."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        self.closed = threading.Event()

    def open(self, margin: float = 0.0) -> bool:
        return not self.closed.is_set() and time.monotonic() < self.deadline - margin


def _clients_loop(s: Scenario, client, workload: _Workload, window: _Window) -> None:
    while window.open():
        s.send(client, workload.next_op(), timeout=30)


def _cron_loop(s: Scenario, workload: _Workload, window: _Window) -> None:
    user = s.user()
    while window.open():
        op = workload.next_op()
        op.user, op.client = user, f"cron:{user}"
        s.history.add(run_command(op, env=s.stack.env(), timeout=60))


def _stop_next_holder(s: Scenario, workload: _Workload, rng: random.Random) -> int | None:
    """SIGSTOP the next worker granted a lease on a random hot resource, right after the
    grant (the proxy keeps the grant back until the worker is stopped)."""
    grant = s.watch_grant(rng.choice(workload.hot), hold=True)
    try:
        pid = grant_pid(grant, timeout=1.5)
    except HarnessError:
        return None  # no grant on that resource just now
    finally:
        if not grant.arrived.is_set():
            grant.release()
    try:
        if pid in s.stack.worker_pids():
            os.kill(pid, signal.SIGSTOP)
            return pid
        return None  # a cron command: left alone
    finally:
        grant.release()


def _chaos_loop(s: Scenario, workload: _Workload, window: _Window, log: list) -> None:
    """Freeze one worker at a time, mostly one just granted a hot lease; always thaw it."""
    rng = random.Random(workload.rng.random())
    while window.open(margin=4):
        time.sleep(rng.uniform(0.2, 1.0))
        pid = _stop_next_holder(s, workload, rng) if rng.random() < 0.7 else None
        holder = pid is not None
        if pid is None:
            workers = s.stack.worker_pids()
            if not workers:
                continue
            pid = rng.choice(workers)
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
        # A lease holder is frozen past its TTL, so that someone may take over meanwhile.
        pause = rng.uniform(1.5, 3.0) if holder else rng.uniform(0.3, 2.5)
        try:
            time.sleep(pause)
        finally:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        log.append({"pause": round(pause, 2), "held a lease": holder})


@scenario(
    "8-load",
    group=8,
    title="Load: 2 instances x 2 workers, 16 clients + cron, random SIGSTOP of a worker",
    expected="every invariant holds for every resource; no client told a success that is "
    "not in the database",
)
def load(s: Scenario) -> None:
    from locking.models import FenceEvent

    seconds = float(os.environ.get("FAULTS_LOAD_SECONDS", "60"))
    clients = int(os.environ.get("FAULTS_CLIENTS", "16"))
    rng = random.Random(int(os.environ.get("FAULTS_SEED", "9")))
    workload = _Workload(s, rng)
    freezes: list[dict] = []
    first_event = FenceEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    started = time.monotonic()
    window = _Window(seconds)
    threads = [
        threading.Thread(
            target=_clients_loop,
            args=(s, s.client(index % len(s.stack.apps)), workload, window),
            name=f"client-{index}",
        )
        for index in range(clients)
    ]
    threads.append(threading.Thread(target=_cron_loop, args=(s, workload, window)))
    chaos = threading.Thread(target=_chaos_loop, args=(s, workload, window, freezes))
    # External calls take a realistic 150 ms, so leases are held long enough for a freeze
    # to land inside one (and for others to take over while it lasts).
    s.stack.standin.delay = EXTERNAL_CALL_SECONDS
    try:
        for thread in [*threads, chaos]:
            thread.start()
        for thread in [*threads, chaos]:
            thread.join(max(window.deadline - time.monotonic(), 0) + 90)
    finally:
        # Also on the way out of an interrupted run: the threads stop after their request.
        window.closed.set()
        s.stack.standin.delay = 0.0
    elapsed = time.monotonic() - started
    stuck = [pid for pid in s.stack.worker_pids() if process_state(pid) == "T"]
    s.expect(not stuck, f"workers left stopped: {stuck}")
    ops = s.history.snapshot()
    by_kind = Counter(f"{op.kind} {op.verdict}" for op in ops)
    events = Counter(
        FenceEvent.objects.filter(pk__gt=first_event).values_list("outcome", flat=True)
    )
    s.fact("seconds", round(elapsed, 1))
    s.fact("clients", clients)
    s.fact("requests per second", round(len(ops) / elapsed, 1))
    s.fact("freezes", len(freezes))
    s.fact("freezes of a lease holder", sum(f["held a lease"] for f in freezes))
    s.fact("seconds frozen", round(sum(f["pause"] for f in freezes), 1))
    s.fact("answers", dict(sorted(by_kind.items())))
    s.fact("audit outcomes", dict(sorted(events.items())))
    s.fact("resources", len({op.resource for op in ops}))
    s.expect(
        not any(op.verdict in ("error", "invalid") for op in ops),
        "some requests were answered 500 or 4xx: "
        + "; ".join(f"{op.status} {op.detail[:80]}" for op in ops if op.verdict == "error")[:400],
    )
    s.observe(
        f"{len(ops)} requests on {s.facts['resources']} resources in {elapsed:.0f}s, "
        f"{len(freezes)} worker freezes ({s.facts['seconds frozen']}s); "
        f"{events.get('stale', 0)} stale tokens rejected"
    )
