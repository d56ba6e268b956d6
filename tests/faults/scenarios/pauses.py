"""Scenarios 1-3: a holder paused past its lease (its late external call refused by the
receiver in 1d), the stale holder committing first, and a holder killed inside its
critical section.

Each forces its interleaving instead of hoping for it: the Redis proxy keeps back the
grant's reply, the stand-in keeps an external call waiting, or a table lock from the
harness stops a worker at its INSERT, with its fence UPDATE done and its transaction open.
The worker is then frozen with SIGSTOP (or killed with SIGKILL) while the lease runs out.
"""

import os
import signal

from tests.faults.scenario import Scenario, grant_pid, scenario
from tests.faults.scenarios.common import (
    CLAIM_STATEMENT,
    INSERT_STATEMENT,
    INSERT_TARGET,
    billing_records,
    external_call_of,
    racing_ops,
    stored,
    tokens_sent,
)
from tests.harness.processes import frozen

# -- 1. pause past the TTL -----------------------------------------------------------------


def pause_after_acquire(s: Scenario, kind: str, rival_via_command: bool) -> None:
    first, second = racing_ops(s, kind)
    grant = s.watch_grant(first.resource, hold=True)
    paused = s.send_later(s.client(0), first)
    with frozen(grant_pid(grant)):
        grant.release()  # the grant reaches a process that cannot read it yet
        s.wait_lock_gone(first.resource)
        rival = s.command(second) if rival_via_command else s.send(s.client(1), second)
    first = paused.result(60)
    s.expect_verdict(rival, "done")
    s.expect_verdict(first, "refused")
    s.fact("database", stored(first))
    s.observe(
        f"paused holder told {first.verdict} ({first.status}); rival told {rival.verdict} "
        f"({rival.status})"
    )


def pause_in_external_call(s: Scenario, kind: str, rival_via_command: bool) -> None:
    first, second = racing_ops(s, kind)
    token = s.stack.counter(first.resource) + 1
    gate = s.hold_call(external_call_of(first, token))
    grant = s.watch_grant(first.resource)
    paused = s.send_later(s.client(0), first)
    gate.wait_arrived(1, timeout=15)
    with frozen(grant_pid(grant)):
        gate.release()  # the answer waits in the socket of a frozen worker
        s.wait_lock_gone(first.resource)
        rival = s.command(second) if rival_via_command else s.send(s.client(1), second)
    first = paused.result(60)
    s.expect_verdict(rival, "done")
    s.expect_verdict(first, "refused")
    s.fact("database", stored(first))
    s.fact("external calls", tokens_sent(s, first))
    s.fact("cancellations", tokens_sent(s, first, cancellations=True))
    if kind == "charges":
        s.fact("billing records", billing_records(first))
    s.observe(
        f"paused holder told {first.verdict} ({first.status}); rival told {rival.verdict} "
        f"({rival.status})"
    )


def late_call_after_takeover(s: Scenario, kind: str) -> None:
    """The holder's external call is still on its way when its lease runs out; a newer
    holder's call reaches the stand-in first and commits. The late call is then refused by
    the receiver (409), and its holder answers stale, before anything is written."""
    first, second = racing_ops(s, kind)
    token = s.stack.counter(first.resource) + 1
    late_call = external_call_of(first, token)
    gate = s.hold_call(late_call)  # held before the stand-in's receiver decides it
    paused = s.send_later(s.client(0), first)
    gate.wait_arrived(1, timeout=15)
    s.wait_lock_gone(first.resource)
    rival = s.command(second)
    gate.release()  # the call reaches the receiver after the newer holder's
    first = paused.result(60)
    s.expect_verdict(rival, "done")
    s.expect_verdict(first, "refused")
    answers = [(r.token, r.status, r.verdict) for r in s.stack.standin.received if late_call(r)]
    s.expect(answers == [(token, 409, "stale")], f"the late call was answered {answers}")
    s.fact("database", stored(first))
    s.fact("external calls", tokens_sent(s, first))
    s.fact("late call answered", answers)
    if kind == "charges":
        s.fact("billing records", billing_records(first))
    s.observe(
        f"late call refused by the receiver ({answers[0][1] if answers else None}); its "
        f"holder told {first.verdict} ({first.status}); rival told {rival.verdict} "
        f"({rival.status})"
    )


def pause_before_commit(s: Scenario, kind: str) -> None:
    first, second = racing_ops(s, kind)
    grant = s.watch_grant(first.resource)
    with s.table_held(INSERT_TARGET[kind]) as table:
        paused = s.send_later(s.client(0), first)
        s.wait_blocked(INSERT_STATEMENT[kind])
        with frozen(grant_pid(grant)):
            table.release()  # the INSERT completes; COMMIT waits for a frozen process
            s.wait_lock_gone(first.resource)
            rival_future = s.send_later(s.client(1), second)
            # The rival passes acquire, then its claim waits for our fence record's lock.
            s.wait_blocked(CLAIM_STATEMENT)
    first = paused.result(60)
    rival = rival_future.result(60)
    # The paused holder's fence UPDATE ran before the takeover, so its commit is legal;
    # the business check makes the newer holder find the work done.
    s.expect_verdict(first, "done")
    s.expect_verdict(rival, "already_done" if kind == "charges" else "refused")
    s.fact("database", stored(first))
    s.observe(
        f"paused holder told {first.verdict} ({first.status}); rival (its claim blocked on "
        f"the fence record) told {rival.verdict} ({rival.status})"
    )


_PAUSE = "paused holder is refused as stale (409 / 75); the rival is done"


@scenario("1a-charges", group=1, title="Pause past TTL after acquire (charges)", expected=_PAUSE)
def _1a_charges(s):
    pause_after_acquire(s, "charges", rival_via_command=False)


@scenario("1a-assign", group=1, title="Pause past TTL after acquire (vendor)", expected=_PAUSE)
def _1a_assign(s):
    pause_after_acquire(s, "assign", rival_via_command=True)


@scenario(
    "1b-charges",
    group=1,
    title="Pause past TTL inside the external call (charges)",
    expected=_PAUSE,
)
def _1b_charges(s):
    pause_in_external_call(s, "charges", rival_via_command=True)


@scenario(
    "1b-assign", group=1, title="Pause past TTL inside the external call (vendor)", expected=_PAUSE
)
def _1b_assign(s):
    pause_in_external_call(s, "assign", rival_via_command=False)


_LATE = (
    "the late call is refused by the receiver (409); its holder is told stale (409); "
    "the rival is done"
)


@scenario(
    "1d-charges",
    group=1,
    title="The paused holder's call arrives after the newer holder's (charges)",
    expected=_LATE,
)
def _1d_charges(s):
    late_call_after_takeover(s, "charges")


@scenario(
    "1d-assign",
    group=1,
    title="The paused holder's call arrives after the newer holder's (vendor)",
    expected=_LATE,
)
def _1d_assign(s):
    late_call_after_takeover(s, "assign")


@scenario(
    "1c-charges",
    group=1,
    title="Pause past TTL after the fence UPDATE, before COMMIT (charges)",
    expected="paused holder commits (its fence ran first); rival's claim waits on the fence "
    "record's lock, then it answers already generated",
)
def _1c_charges(s):
    pause_before_commit(s, "charges")


@scenario(
    "1c-assign",
    group=1,
    title="Pause past TTL after the fence UPDATE, before COMMIT (vendor)",
    expected="paused holder commits; rival's claim waits on the fence record's lock, then "
    "it is refused: assigned to another vendor",
)
def _1c_assign(s):
    pause_before_commit(s, "assign")


# -- 2. the stale holder commits first -------------------------------------------------------


def stale_comes_back_first(s: Scenario, kind: str) -> None:
    """A (older token) and B (newer token) both wait in their external calls; A comes back
    first. B claimed before its call (hoa/fenced.py), so A's commit is refused and B's
    stands: the outside and the database keep B's."""
    first, second = racing_ops(s, kind)
    token = s.stack.counter(first.resource) + 1
    gate_a = s.hold_call(external_call_of(first, token))
    gate_b = s.hold_call(external_call_of(first, token + 1))
    if kind == "charges":
        older = s.spawn(first)  # cron holds the older lease
        gate_a.wait_arrived(1, timeout=30)
        s.wait_lock_gone(first.resource)
        newer = s.send_later(s.client(1), second)
        gate_b.wait_arrived(1, timeout=15)
        gate_a.release()
        first = older.wait(60)
        gate_b.release()
        second = newer.result(60)
    else:
        older = s.send_later(s.client(0), first)
        gate_a.wait_arrived(1, timeout=15)
        s.wait_lock_gone(first.resource)
        newer = s.spawn(second)
        gate_b.wait_arrived(1, timeout=30)
        gate_a.release()
        first = older.result(60)
        gate_b.release()
        second = newer.wait(60)
    s.expect_verdict(first, "refused")
    s.expect_verdict(second, "done")
    s.fact("database", stored(second))
    s.fact("external calls", tokens_sent(s, first))
    if kind == "charges":
        s.fact("billing records", billing_records(second))
    s.observe(
        f"older token came back first and was refused ({first.status}); newer "
        f"{second.verdict} ({second.status}); one set of rows, the newer holder's"
    )


@scenario(
    "2-charges",
    group=2,
    title="Stale holder comes back first (charges)",
    expected="the newer holder claimed first: the older one is refused (75), the newer one's "
    "run stands (303), in billing as in the database",
)
def _2_charges(s):
    stale_comes_back_first(s, "charges")


@scenario(
    "2-assign",
    group=2,
    title="Stale holder comes back first (vendor)",
    expected="the newer holder claimed first: the older one is refused (409), the newer one's "
    "vendor stands (0)",
)
def _2_assign(s):
    stale_comes_back_first(s, "assign")


# -- 3. SIGKILL inside the critical section --------------------------------------------------


def killed_in_transaction(s: Scenario, kind: str) -> None:
    first, second = racing_ops(s, kind)
    grant = s.watch_grant(first.resource)
    with s.table_held(INSERT_TARGET[kind]) as table:
        doomed = s.send_later(s.client(0), first)
        s.wait_blocked(INSERT_STATEMENT[kind])
        os.kill(grant_pid(grant), signal.SIGKILL)
        table.release()
    first = doomed.result(60)
    after_kill = stored(first)
    s.fact("after the kill", after_kill)
    if kind == "charges":
        s.expect(
            after_kill["charges"] == 0 and after_kill["run"] in (None, "pending"),
            f"the killed holder left {after_kill}",
        )
    else:
        s.expect(after_kill["rows"] == 0, f"the killed holder left {after_kill}")
    s.wait_lock_gone(first.resource)  # nobody released it: Redis expires it
    s.stack.apps[0].wait_for_workers()
    second = s.send(s.client(1), second)
    s.expect_verdict(first, "no_answer")
    s.expect_verdict(second, "done")
    s.fact("after the retry", stored(first))
    s.observe(
        f"killed worker's transaction rolled back ({after_kill}); lease expired; next holder "
        f"{second.verdict}"
    )


def killed_command_in_external_call(s: Scenario) -> None:
    first, second = racing_ops(s, "assign")
    token = s.stack.counter(first.resource) + 1
    gate = s.hold_call(external_call_of(first, token))
    cron = s.spawn(first)
    gate.wait_arrived(1, timeout=30)
    os.killpg(cron.pid, signal.SIGKILL)
    gate.release()
    first = cron.wait(30)
    s.fact("after the kill", stored(first))
    s.wait_lock_gone(first.resource)
    second = s.send(s.client(0), second)
    s.expect_verdict(first, "no_answer")
    s.expect_verdict(second, "done")
    s.expect(stored(first)["rows"] == 1, f"expected one assignment, found {stored(first)}")
    s.observe(
        f"command killed mid-call wrote nothing; the next holder (another vendor, no "
        f"reassign) {second.verdict}"
    )


_KILL = "no partial rows; the lease expires; the next holder completes the work"


@scenario("3a-charges", group=3, title="SIGKILL inside the transaction (charges)", expected=_KILL)
def _3a_charges(s):
    killed_in_transaction(s, "charges")


@scenario("3a-assign", group=3, title="SIGKILL inside the transaction (vendor)", expected=_KILL)
def _3a_assign(s):
    killed_in_transaction(s, "assign")


@scenario(
    "3b-assign-command",
    group=3,
    title="SIGKILL of a command inside its external call (vendor)",
    expected=_KILL,
)
def _3b_command(s):
    killed_command_in_external_call(s)
