"""Scenario 7: a client whose wall clock jumps does not change who holds the lock.

Expiry is Redis's (``PX`` on the lock key) and a holder's own deadline is
``time.monotonic()``. So a holder whose clock jumps an hour ahead still holds its lease
(no one else gets it early), and one whose clock jumps an hour back still loses it on
time (it cannot keep it longer), and its late write is refused by the fence.
"""

import json
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path

from tests.faults.scenario import Scenario, scenario
from tests.harness import HarnessError

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
TTL = 4.0  # long enough that a busy machine cannot make the harness miss it


class _Actor:
    """A ``clock_child`` process and its line protocol."""

    def __init__(self, s: Scenario, *, env: dict, name: str):
        self.name = name
        command = [sys.executable, "-m", "tests.faults.clock_child"]
        self.process = s.stack.start(command, env=env, stdin=subprocess.PIPE)

    def ask(self, **command) -> dict:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise HarnessError(f"{self.name} died: {self.process.stderr.read()[-800:]}")
        return json.loads(line)

    def quit(self) -> None:
        with suppress(HarnessError, BrokenPipeError, ValueError):
            self.ask(do="quit")
        self.process.wait(10)


def _clock_env(s: Scenario, stamp_file: Path) -> tuple[dict, str]:
    env = s.stack.env()
    if LIBFAKETIME.exists():
        stamp_file.write_text("+0\n")
        env.update(
            {
                "FAULTS_CLOCK": "libfaketime",
                "LD_PRELOAD": str(LIBFAKETIME),
                "FAKETIME_TIMESTAMP_FILE": str(stamp_file),
                "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            }
        )
        return env, "libfaketime (CLOCK_REALTIME of the whole process)"
    env["FAULTS_CLOCK"] = "python"
    return env, "time.time and datetime.now patched in the child (libfaketime not installed)"


@scenario(
    "7-clock-jumps",
    group=7,
    title="A holder's wall clock jumps +1 h, then -2 h",
    expected="it keeps the lease until Redis expires it, loses it on time, and its late "
    "write is refused; the other client's lease is untouched",
)
def clock_jumps(s: Scenario) -> None:
    complaint = s.complaint()
    resource = f"vendor-assignment:complaint:{complaint}"
    with tempfile.TemporaryDirectory(prefix="hoa-faults-clock-") as folder:
        env, how = _clock_env(s, Path(folder) / "faketime")
        s.fact("clock", how)
        jumper = _Actor(s, env=env, name="jumper")
        steady = _Actor(s, env=s.stack.env(), name="steady")
        try:
            _play(s, jumper, steady, resource, complaint)
        finally:
            jumper.quit()
            steady.quit()


def _play(s: Scenario, jumper: _Actor, steady: _Actor, resource: str, complaint: int) -> None:
    granted_at = time.monotonic()
    grant = jumper.ask(do="acquire", resource=resource, ttl=TTL)
    s.expect(grant.get("granted"), f"jumper could not acquire: {grant}")
    ahead = jumper.ask(do="jump", seconds=3600)
    s.fact("jumper's clock after +1 h", ahead["wall"])
    status = jumper.ask(do="status")
    s.expect(status["probably_valid"], "a clock jump ahead made the holder think it lost its lease")
    early = steady.ask(do="acquire", resource=resource, ttl=TTL)
    if early.get("granted"):
        if time.monotonic() - granted_at < TTL:
            s.violation("a wall-clock jump ahead let a second client acquire a held lease")
        else:
            s.expect(False, "the harness was too slow: the lease had expired on its own")
    behind = jumper.ask(do="jump", seconds=-7200)
    s.fact("jumper's clock after -2 h", behind["wall"])
    s.wait_lock_gone(resource, timeout=TTL + 3)
    status = jumper.ask(do="status")
    s.expect(
        not status["probably_valid"],
        "a clock jump back made the holder believe its lease outlived Redis's expiry",
    )
    taken = steady.ask(do="acquire", resource=resource, ttl=TTL)
    s.expect(
        taken.get("granted") and taken["token"] == grant.get("token", 0) + 1,
        f"after expiry the other client should get the next token: {taken}",
    )
    newer = steady.ask(do="write", complaint=complaint)
    late = jumper.ask(do="write", complaint=complaint)
    s.expect(newer.get("written"), f"the current holder's write failed: {newer}")
    if late.get("written"):
        s.violation("the holder whose lease expired wrote after the newer holder")
    released = jumper.ask(do="release")
    s.expect(not released["released"], "the expired holder's release reported success")
    owner = s.stack.lock_value(resource) or ""
    if f"pid {taken.get('pid')}" not in owner:
        s.violation("the expired holder's release removed the current holder's lease")
    steady.ask(do="release")
    s.fact(
        "tokens",
        {"jumper": grant.get("token"), "steady": taken.get("token"), "late write": late},
    )
    s.observe(
        f"+1 h: others told busy; -2 h: lease expired on Redis's clock, jumper's late write "
        f"{'refused' if late.get('stale') else late}; clock: {s.facts['clock'].split(' (')[0]}"
    )
