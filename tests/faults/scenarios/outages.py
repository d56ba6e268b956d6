"""Scenarios 4-6: Redis down or emptied, PostgreSQL restarted, and a bad network to Redis
and to the external endpoint (through the suite's TCP proxies)."""

import time

from tests.faults.clients import Op
from tests.faults.scenario import Scenario, scenario
from tests.faults.scenarios.common import (
    INSERT_STATEMENT,
    INSERT_TARGET,
    billing_records,
    external_call_of,
    racing_ops,
    stored,
    tokens_sent,
)


def _timed(function, *args, **kwargs):
    started = time.monotonic()
    value = function(*args, **kwargs)
    return value, round(time.monotonic() - started, 2)


def _nothing_written(s: Scenario, op) -> None:
    rows = stored(op)
    if op.kind == "charges":
        clean = rows["run"] in (None, "pending") and rows["charges"] == 0
    else:
        clean = rows["rows"] == 0
    s.expect(clean, f"{op.resource}: expected nothing written, found {rows}")
    s.expect(not tokens_sent(s, op), f"{op.resource}: an external call was made")


# -- 4. Redis --------------------------------------------------------------------------------


@scenario(
    "4a-redis-down-acquire",
    group=4,
    title="Redis down at acquire",
    expected="503 / exit 1, nothing written, no external call; the retry after Redis "
    "returns succeeds",
)
def redis_down_at_acquire(s: Scenario) -> None:
    charges, assign = s.charges(), s.assign(s.complaint(), s.world.vendors[0])
    cron_charges = s.charges()
    s.stack.redis_server.stop(kill=True)
    try:
        web_charges, seconds = _timed(s.send, s.client(0), charges)
        web_assign = s.send(s.client(1), assign)
        cron = s.command(cron_charges)
    finally:
        s.stack.redis_server.start()  # empty: it never persisted anything
    s.fact("seconds to the 503", seconds)
    for op in (web_charges, web_assign, cron):
        s.expect_verdict(op, "unavailable")
        _nothing_written(s, op)
    retries = [
        s.send(s.client(0), s.charges(month=charges.month)),
        s.send(s.client(1), s.assign(assign.complaint, assign.vendor)),
        s.command(s.charges(month=cron_charges.month)),
    ]
    for op in retries:
        s.expect_verdict(op, "done")
    s.observe(
        f"{web_charges.status} / {web_assign.status} / exit {cron.status} after "
        f"{seconds}s, nothing written; retries: {', '.join(op.verdict for op in retries)}"
    )


@scenario(
    "4b-redis-down-release",
    group=4,
    title="Redis down during release",
    expected="the holder still answers done (release failure is logged); its lease stays "
    "until Redis expires it; meanwhile others are told busy",
)
def redis_down_at_release(s: Scenario) -> None:
    op = s.charges()
    ttl = 8.0  # long enough to see the orphaned lease before it expires
    with s.table_held(INSERT_TARGET["charges"]) as table:
        cron = s.spawn(op, CHARGES_LOCK_TTL_SECONDS=f"{ttl:g}")
        value = s.wait_lock(op.resource, timeout=30)
        s.wait_blocked(INSERT_STATEMENT["charges"], timeout=30)
        s.stack.redis_proxy.set_mode("refuse")  # the app loses Redis mid-operation
        table.release()
        try:
            op, seconds = _timed(cron.wait, 60)
        finally:
            s.stack.redis_proxy.heal()
    left = s.stack.redis().pttl("lock:{" + op.resource + "}")
    still_there = s.stack.lock_value(op.resource) == value
    s.fact("seconds until the holder answered", seconds)
    s.fact("lease left behind (ms)", left)
    s.expect_verdict(op, "done")
    s.expect(still_there, "the holder's lease was gone although its release could not run")
    busy = s.send(s.client(0), s.charges(month=op.month))
    s.expect_verdict(busy, "refused")
    s.wait_lock_gone(op.resource, timeout=ttl + 5)
    after = s.send(s.client(0), s.charges(month=op.month))
    s.expect_verdict(after, "already_done")
    s.observe(
        f"holder answered {op.verdict} after {seconds}s; its lease stayed ({left} ms left), "
        f"a rival was told {busy.verdict}, then after expiry {after.verdict}"
    )


@scenario(
    "4c-redis-data-loss",
    group=4,
    title="Redis restart with data loss (fence counters reset)",
    expected="the first grant after the restart sees the counter gone and starts a new "
    "epoch before any work: the write goes through at once; tokens never go backwards",
)
def redis_counter_loss(s: Scenario) -> None:
    from locking.models import FenceEpoch, FenceEvent

    complaint = s.complaint()
    vendors = s.world.vendors
    web = s.client(0)
    for index, vendor in enumerate(vendors[:3]):
        s.expect_verdict(s.send(web, s.assign(complaint, vendor, reassign=index > 0)), "done")
    month = s.month()
    s.expect_verdict(s.send(web, s.charges(month=month)), "done")
    s.expect_verdict(s.send(web, s.charges(month=month)), "already_done")
    first = s.assign(complaint, vendors[0])
    before = {"complaint": stored(first)["fence"], "run": stored(s.charges(month=month))["fence"]}
    s.stack.redis_server.restart_empty()
    s.fact("counters after the restart", s.stack.counter(first.resource))
    assign = s.send(s.client(1), s.assign(complaint, vendors[3], reassign=True))
    generate = s.command(s.charges(month=month))
    after = {"complaint": stored(first)["fence"], "run": stored(s.charges(month=month))["fence"]}
    s.expect_verdict(assign, "done")
    s.expect_verdict(generate, "already_done")
    s.fact("fences before", before)
    s.fact("fences after", after)
    for name in before:
        if after[name] <= before[name]:
            s.violation(f"{name} fence went from {before[name]} to {after[name]}")
    epochs = dict(
        FenceEpoch.objects.filter(resource__in=[first.resource, generate.resource]).values_list(
            "resource", "epoch"
        )
    )
    s.fact("epochs after the restart", epochs)
    s.expect(
        sorted(epochs.values()) == [1, 1], f"expected epoch 1 for both resources, found {epochs}"
    )
    doomed = FenceEvent.objects.filter(
        resource__in=[first.resource, generate.resource], outcome="stale"
    ).count()
    s.expect(doomed == 0, f"expected no rejected attempt after the restart, found {doomed}")
    s.observe(
        f"after the reset: assign {assign.verdict}, generate {generate.verdict}; fences "
        f"{before} -> {after}; epochs {sorted(epochs.values())}, {doomed} rejected attempts"
    )


# -- 5. PostgreSQL ---------------------------------------------------------------------------


def postgres_restart(s: Scenario, kind: str, via_command: bool) -> None:
    first, _ = racing_ops(s, kind)
    token = s.stack.counter(first.resource) + 1
    gate = s.hold_call(external_call_of(first, token))
    if via_command:
        pending = s.spawn(first)
        gate.wait_arrived(1, timeout=30)
    else:
        pending = s.send_later(s.client(0), first)
        gate.wait_arrived(1, timeout=15)
    s.restart_postgres()
    gate.release()
    first = pending.wait(60) if via_command else pending.result(60)
    s.fact("failure", f"{first.verdict} {first.status}: {first.detail[:200]}")
    if via_command:
        # Cron reads stderr: one line naming PostgreSQL, not a traceback.
        s.expect_verdict(first, "unavailable")
    else:
        # A 5xx page (the 500 page or a 503 naming the database) is a clear failure.
        s.expect_verdict(first, "unavailable", "indeterminate", "error")
    rows = stored(first)
    clean = rows["charges"] == 0 if kind == "charges" else rows["rows"] == 0
    s.expect(clean, f"half-written after the restart: {rows}")
    again = Op(**_fresh(first))
    retry = s.command(again) if via_command else s.send(s.client(1), again)
    s.expect_verdict(retry, "done")
    s.observe(f"{first.verdict} ({first.status}); nothing written ({rows}); retry {retry.verdict}")


def _fresh(op) -> dict:
    """The same request again, as a new operation."""
    return {
        "kind": op.kind,
        "org": op.org,
        "org_id": op.org_id,
        "month": op.month,
        "complaint": op.complaint,
        "vendor": op.vendor,
        "reassign": op.reassign,
    }


_PG = "a clear failure (5xx / exit 1), nothing half-written; the retry succeeds"


@scenario(
    "5-postgres-restart-assign",
    group=5,
    title="PostgreSQL restart between the external call and the transaction (vendor)",
    expected=_PG,
    needs_private_postgres=True,
)
def _5_assign(s):
    postgres_restart(s, "assign", via_command=False)


@scenario(
    "5-postgres-restart-charges",
    group=5,
    title="PostgreSQL restart between the external call and the transaction (charges, cron)",
    expected=_PG,
    needs_private_postgres=True,
)
def _5_charges(s):
    postgres_restart(s, "charges", via_command=True)


# -- 6. the network --------------------------------------------------------------------------


@scenario(
    "6a-redis-latency",
    group=6,
    title="Slow network to Redis (150 ms each way), 8 racing clients",
    expected="slower answers, still exactly one run and one vendor",
)
def redis_latency(s: Scenario) -> None:
    month, complaint = s.month(), s.complaint()
    s.stack.redis_proxy.set_mode("pass", latency=0.15)
    try:
        futures = []
        for index in range(4):
            client = s.client(index % 2)
            futures.append(s.send_later(client, s.charges(month=month)))
        for index in range(4):
            client = s.client(index % 2)
            vendor = s.world.vendors[index % len(s.world.vendors)]
            futures.append(s.send_later(client, s.assign(complaint, vendor)))
        ops = [future.result(90) for future in futures]
    finally:
        s.stack.redis_proxy.heal()
    charges = [op for op in ops if op.kind == "charges"]
    assigns = [op for op in ops if op.kind == "assign"]
    s.expect(
        sum(op.verdict == "done" for op in charges) == 1,
        f"expected one charges 'done': {[op.verdict for op in charges]}",
    )
    s.expect(
        sum(op.verdict == "done" for op in assigns) == 1,
        f"expected one assignment 'done': {[op.verdict for op in assigns]}",
    )
    for op in ops:
        s.expect_verdict(op, "done", "already_done", "refused")
    s.observe(", ".join(f"{op.kind} {op.verdict}" for op in ops))


def _redis_cut(s: Scenario, mode: str) -> None:
    op = s.charges()
    s.stack.redis_proxy.set_mode(mode)
    try:
        cut, seconds = _timed(s.send, s.client(0), op, timeout=60)
    finally:
        s.stack.redis_proxy.heal()
    s.fact("seconds to the answer", seconds)
    s.expect_verdict(cut, "unavailable")
    _nothing_written(s, cut)
    retry = s.send(s.client(1), s.charges(month=op.month))
    s.expect_verdict(retry, "done")
    s.observe(f"{cut.status} after {seconds}s, nothing written; after healing: {retry.verdict}")


@scenario(
    "6b-redis-stall",
    group=6,
    title="Partition to Redis: connections stall (no reset)",
    expected="503 once the socket timeouts and client retries run out; nothing written",
)
def redis_stall(s):
    _redis_cut(s, "stall")


@scenario(
    "6c-redis-reset",
    group=6,
    title="Partition to Redis: connections reset",
    expected="503 quickly; nothing written; retry succeeds",
)
def redis_reset(s):
    _redis_cut(s, "drop")


@scenario(
    "6d-external-stall",
    group=6,
    title="Partition to the external endpoint: the call stalls (cron, 1 s timeout)",
    expected="exit 75 after the call timeout, not known (recorded to be settled), nothing of "
    "the run written; the retry by the same key succeeds",
)
def external_stall(s: Scenario) -> None:
    op = s.charges()
    s.stack.external_proxy.set_mode("stall")
    try:
        cut, seconds = _timed(s.command, op, EXTERNAL_CALL_TIMEOUT_SECONDS="1")
    finally:
        s.stack.external_proxy.heal()
    s.fact("seconds to the answer", seconds)
    s.expect_verdict(cut, "not_known")
    rows = stored(cut)
    s.expect(rows["charges"] == 0 and rows["run"] is None, f"written: {rows}")
    retry = s.command(s.charges(month=op.month), EXTERNAL_CALL_TIMEOUT_SECONDS="1")
    s.expect_verdict(retry, "done")
    s.observe(f"exit {cut.status} ({cut.verdict}) after {seconds}s; retry {retry.verdict}")


@scenario(
    "6e-external-reset",
    group=6,
    title="Partition to the external endpoint: connections reset",
    expected="202 at once, not known (the request may have gone through), nothing of the "
    "assignment written; the retry by the same key succeeds",
)
def external_reset(s: Scenario) -> None:
    op = s.assign(s.complaint(), s.world.vendors[0])
    s.stack.external_proxy.set_mode("drop")
    try:
        cut = s.send(s.client(0), op)
    finally:
        s.stack.external_proxy.heal()
    s.expect_verdict(cut, "not_known")
    s.expect(stored(cut)["rows"] == 0, f"written: {stored(cut)}")
    retry = s.send(s.client(1), s.assign(op.complaint, op.vendor))
    s.expect_verdict(retry, "done")
    s.observe(f"{cut.status} ({cut.verdict}); retry {retry.verdict}")


@scenario(
    "6f-external-latency",
    group=6,
    title="Slow external endpoint: each call outlives the lease (2 x 0.8 s > 1 s TTL)",
    expected="a second holder starts while the first is still calling; the fence and the "
    "state check leave exactly one run and one vendor",
)
def external_latency(s: Scenario) -> None:
    month, complaint = s.month(), s.complaint()
    resource = f"monthly-charges:org:{s.world.org_id('faults-maple')}:{month}"
    grant = s.watch_grant(resource)
    # 0.8 s each way: every call takes 1.6 s, longer than the 1 s lease.
    s.stack.external_proxy.set_mode("pass", latency=0.8)
    try:
        futures = []
        for wave in range(2):
            futures.append(s.send_later(s.client(wave), s.charges(month=month)))
            vendor = s.world.vendors[wave]
            futures.append(s.send_later(s.client(wave), s.assign(complaint, vendor)))
            if wave == 0:
                grant.wait_arrived(15)
                s.wait_lock_gone(resource)  # the first holders' leases ran out mid-call
        ops = [future.result(90) for future in futures]
    finally:
        s.stack.external_proxy.heal()
    charges = [op for op in ops if op.kind == "charges"]
    s.expect(
        sorted(op.verdict for op in charges) in (["already_done", "done"], ["done", "refused"]),
        f"charges: {[op.verdict for op in charges]}",
    )
    assigns = [op for op in ops if op.kind == "assign"]
    s.expect(
        sorted(op.verdict for op in assigns) == ["done", "refused"],
        f"assignments: {[op.verdict for op in assigns]}",
    )
    s.fact("external calls (charges)", tokens_sent(s, charges[0]))
    s.fact("billing records", billing_records(charges[0]))
    s.fact("external calls (vendor)", tokens_sent(s, assigns[0]))
    s.observe(", ".join(f"{op.kind} {op.verdict}" for op in ops))
