"""Holders stepped statement by statement: the harness of the model-based checkers.

A ``Holder`` runs a plan (a function) in a thread of its own, with its own database
connection, and every SQL statement it sends waits at a hold point (a Django execute
wrapper) until the test lets it through (``Stepping.step``). The test therefore chooses
the interleaving, statement by statement; a statement that waits on a lock (PostgreSQL's
``pg_stat_activity``) is left waiting until another step frees it. Used by
locking/tests/test_fence_model.py and tests/races/test_complaint_model.py, where Hypothesis
chooses the steps.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import connection, connections
from hypothesis import Phase

WAIT = 30  # seconds: any one wait of the harness (a loaded machine is slow, not wrong)

# Hypothesis's phases for a search of such holders: no shrinking. An example replays close
# to, not exactly, as it ran (threads, PostgreSQL's lock waits, a loaded machine), and a
# replay that differs is reported as flaky; a failure is printed as it was found, with its
# @reproduce_failure blob.
SEARCH = (Phase.explicit, Phase.reuse, Phase.generate)


@dataclass
class Holder:
    """One holder: a thread running ``plan(holder)``, one statement per permission."""

    name: str
    plan: str
    thread: threading.Thread | None = None
    backend_pid: int | None = None
    at_hold: threading.Event = field(default_factory=threading.Event)
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    done: threading.Event = field(default_factory=threading.Event)
    waiting_for: str = ""
    token: int | None = None
    outcome: str = ""  # what the plan came to: committed / already_done / refused: <why>
    error: BaseException | None = None  # what no plan may raise: the test fails with it

    def hold(self, what: str) -> None:
        """A hold point: say where the thread is, and wait for permission to go on."""
        self.waiting_for = what
        self.at_hold.set()
        if not self.go.acquire(timeout=WAIT * 6):
            raise TimeoutError(f"{self.name} was never let through {what[:60]!r}")
        self.at_hold.clear()

    def gate(self, execute, sql, params, many, context):
        self.hold(sql)
        return execute(sql, params, many, context)


class Stepping:
    """The holders of one example: start them, step them, wait for them to settle."""

    def __init__(self, *, expected: tuple[type[BaseException], ...] = ()):
        self.holders: list[Holder] = []
        self.expected = expected
        self.numbered = 0

    def live(self) -> int:
        return sum(not holder.done.is_set() for holder in self.holders)

    def ready(self) -> list[Holder]:
        return [holder for holder in self.holders if holder.at_hold.is_set()]

    def start(self, plan: str, run: Callable[[Holder], None]) -> Holder:
        """Start a holder running ``run(holder)``; return it once it settled (at its first
        hold point, finished, or waiting on a lock)."""
        self.numbered += 1
        holder = Holder(name=f"h{self.numbered}", plan=plan)
        holder.thread = threading.Thread(target=self._run, args=(holder, run), daemon=True)
        self.holders.append(holder)
        holder.thread.start()
        self.settle(holder)
        return holder

    def step(self, pick: int, statements: int = 1) -> Holder:
        """Let the ``pick``-th holder at a hold point send its next ``statements`` statements
        (fewer if it finishes or waits on a lock first); return it, settled, with every
        other holder settled too (its commit may have freed them)."""
        ready = self.ready()
        holder = ready[pick % len(ready)]
        for _ in range(statements):
            if not holder.at_hold.is_set():
                break  # finished, or waiting on a lock
            holder.at_hold.clear()
            holder.go.release()
            self.settle(holder)
        for other in self.holders:
            if other is not holder:
                self.settle(other)
        return holder

    def settle(self, holder: Holder) -> None:
        """Wait until ``holder`` is at a hold point, finished, or waiting on a lock."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if holder.at_hold.is_set() or holder.done.is_set():
                break
            if holder.backend_pid is not None and waits_on_a_lock(holder.backend_pid):
                return
            time.sleep(0.002)
        else:
            raise AssertionError(f"{holder.name} ({holder.plan}) neither held nor finished")
        if holder.done.is_set() and holder.error is not None:
            raise holder.error

    def finish(self) -> None:
        """Let every holder run to its end (the example's teardown)."""
        deadline = time.monotonic() + WAIT * 6
        while self.live():
            for holder in self.ready():
                holder.at_hold.clear()
                holder.go.release()
            if time.monotonic() > deadline:
                raise AssertionError("holders never finished")
            time.sleep(0.005)
        for holder in self.holders:
            holder.thread.join(WAIT)

    def _run(self, holder: Holder, run: Callable[[Holder], None]) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                holder.backend_pid = cursor.fetchone()[0]
            with connection.execute_wrapper(holder.gate):
                holder.hold("start")
                run(holder)
        except self.expected as exc:
            holder.outcome = f"refused: {type(exc).__name__}"
        except BaseException as exc:
            holder.error = exc
        finally:
            connection.close()
            holder.done.set()


def waits_on_a_lock(pid: int) -> bool:
    """Whether the backend ``pid`` waits on a lock (asked on the test's own connection)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"
