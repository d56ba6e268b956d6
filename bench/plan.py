"""What ``make bench`` runs: the groups of cases, how long, and the targets they answer.

Two profiles: ``FULL`` (about 6-10 minutes on the 2-core machine) and ``QUICK`` (under a
minute: fewer repeats, shorter loops; its numbers are a smoke test, not a result).
"""

from dataclasses import dataclass

from bench.runner import Case, Group


@dataclass(frozen=True)
class Profile:
    name: str
    lock_repeats: int
    lock_iterations: int
    lock_warmup: int
    write_repeats: int
    vendor_ops: int
    charge_units: int
    charge_ops: int
    all_orgs_repeats: int
    alt_repeats: int
    alt_trials: int
    contention_repeats: int
    contention_seconds: float
    http_seconds: float
    http_clients: int = 16


FULL = Profile(
    name="full",
    lock_repeats=7,
    lock_iterations=3000,
    lock_warmup=300,
    write_repeats=5,
    vendor_ops=150,
    charge_units=5000,
    charge_ops=2,
    all_orgs_repeats=3,
    alt_repeats=3,
    alt_trials=10,
    contention_repeats=3,
    contention_seconds=4,
    http_seconds=20,
)

QUICK = Profile(
    name="quick",
    lock_repeats=1,
    lock_iterations=800,
    lock_warmup=50,
    write_repeats=1,
    vendor_ops=30,
    charge_units=5000,
    charge_ops=1,
    all_orgs_repeats=0,
    alt_repeats=1,
    alt_trials=2,
    contention_repeats=1,
    contention_seconds=1.2,
    http_seconds=3,
)


@dataclass(frozen=True)
class Target:
    """A target from issue 10: a paired ratio ``case / versus`` or a value of ``case``."""

    section: str
    text: str
    group: str
    case: str
    op: str  # "<=", ">=" or "=="
    limit: float
    versus: str | None = None
    value: str | None = None  # "metrics.name" or "counts.name" when not a ratio
    report_only: bool = False


TARGETS = [
    Target("1", "ours ≤ 1.0x redis-py Lock", "lock-cycle", "lock.ours", "<=", 1.0, "lock.redis_py"),
    Target(
        "1",
        "ours ≤ 0.8x python-redis-lock",
        "lock-cycle",
        "lock.ours",
        "<=",
        0.8,
        "lock.python_redis_lock",
    ),
    Target(
        "1", "ours ≤ 0.4x pottery Redlock", "lock-cycle", "lock.ours", "<=", 0.4, "lock.pottery"
    ),
    Target("1", "ours ≤ 2.6x one PING", "lock-cycle", "lock.ours", "<=", 2.6, "lock.ping"),
    Target(
        "1",
        "floor: our 2 scripts, bare, vs one PING (report)",
        "lock-cycle",
        "lock.scripts_only",
        "<=",
        0,
        "lock.ping",
        report_only=True,
    ),
    Target(
        "1",
        "ours vs that floor (report)",
        "lock-cycle",
        "lock.ours",
        "<=",
        0,
        "lock.scripts_only",
        report_only=True,
    ),
    Target(
        "1",
        "ours sends 2 Redis commands per cycle",
        "lock-cycle",
        "lock.ours",
        "==",
        2,
        value="counts.redis_sent_total",
    ),
    Target(
        "1",
        "ours with appendfsync always vs default durability (report)",
        "lock-cycle",
        "lock.ours_fsync_always",
        "<=",
        0,
        "lock.ours",
        report_only=True,
    ),
    Target(
        "1",
        "fence check with the epoch check vs without (report)",
        "fence-epoch",
        "fence.lease",
        "<=",
        0,
        "fence.token",
        report_only=True,
    ),
    Target(
        "1",
        "first grant after a loss (new epoch) vs a normal grant (report)",
        "grant-cost",
        "grant.after_loss",
        "<=",
        0,
        "grant.normal",
        report_only=True,
    ),
    Target(
        "1",
        "grant with WAIT for 1 replica vs a normal grant (report)",
        "grant-cost",
        "grant.wait",
        "<=",
        0,
        "grant.normal",
        report_only=True,
    ),
    Target(
        "2",
        "vendor assignment via service ≤ 1.5x plain transaction",
        "fenced-vendor",
        "vendor.service",
        "<=",
        1.5,
        "vendor.plain",
    ),
    Target(
        "2",
        "vendor: service vs the same checks without a lock (report)",
        "fenced-vendor",
        "vendor.service",
        "<=",
        0,
        "vendor.checked",
        report_only=True,
    ),
    Target(
        "2",
        "charge generation (5,000 units, billed) ≤ 1.25x plain bulk_create",
        "fenced-charges",
        "charges.service_billed",
        "<=",
        1.25,
        "charges.bulk_create",
    ),
    Target(
        "2",
        "charge generation, billing URL unset, vs bulk_create (report)",
        "fenced-charges",
        "charges.service",
        "<=",
        0,
        "charges.bulk_create",
        report_only=True,
    ),
    Target(
        "2",
        "charge generation (billed) vs COPY (report)",
        "fenced-charges",
        "charges.service_billed",
        "<=",
        0,
        "charges.copy",
        report_only=True,
    ),
    Target(
        "2",
        "--all-orgs, 200 orgs x 100 units: 2 workers >= 1.6x one",
        "charges-all-orgs",
        "all_orgs.workers_2",
        ">=",
        1.6,
        "all_orgs.workers_1",
    ),
    Target(
        "3",
        "our loser answered ≤ 3x one uncontended acquire",
        "alternatives",
        "alt.ours",
        "<=",
        3.0,
        value="metrics.loser_vs_acquire",
    ),
    Target(
        "3",
        "our loser does zero database round trips",
        "alternatives",
        "alt.ours",
        "==",
        0,
        value="metrics.loser_round_trips",
    ),
    Target(
        "4",
        "8 resources x 8 processes ≥ 1.6x one client",
        "contention",
        "contention.each",
        ">=",
        1.6,
        "contention.solo",
    ),
    Target(
        "4",
        "8-way on one resource, answer + backoff: ≥ 0.8x solo",
        "contention",
        "contention.one_backoff",
        ">=",
        0.8,
        "contention.solo",
    ),
    Target(
        "4",
        "8-way on one resource, acquire(wait=): ≥ 0.8x solo",
        "contention",
        "contention.one_wait",
        ">=",
        0.8,
        "contention.solo",
    ),
    Target(
        "4",
        "8-way on one resource, naive hot retry (report)",
        "contention",
        "contention.one_naive",
        ">=",
        0,
        "contention.solo",
        report_only=True,
    ),
    Target(
        "5",
        "HTTP: no 5xx under 16 clients",
        "http",
        "http.assign",
        "==",
        0,
        value="metrics.http_5xx",
    ),
]


def lock_cycle(profile: Profile, redis_url: str) -> Group:
    variants = [
        ("ping", "PING (one round trip: the floor)"),
        ("seed", "seed design: SETNX + INCR + DEL"),
        ("redis_py", "redis-py Lock (no token)"),
        ("python_redis_lock", "python-redis-lock (no token)"),
        ("pottery", "pottery Redlock, 1 master (no token)"),
        ("scripts_only", "our 2 Lua scripts, bare (floor)"),
        ("ours", "ours: FenceLock (token issued)"),
        ("ours_fsync_always", "ours, appendfsync always (report)"),
    ]
    return Group(
        id="lock-cycle",
        title="1. Lock cycle: acquire + release, one client, loopback",
        baseline="lock.redis_py",
        repeats=profile.lock_repeats,
        latency_label="cycle",
        note=f"{profile.lock_iterations} cycles per process after {profile.lock_warmup} warm-up",
        columns=[
            ("Redis cmds sent", "counts.redis_sent_total"),
            ("executed", "counts.redis_executed_total"),
        ],
        cases=[
            Case(
                id=f"lock.{variant}",
                label=label,
                entry="bench.cases.lock_cycle:run",
                django=False,
                params={
                    "variant": variant,
                    "redis_url": redis_url,
                    "iterations": profile.lock_iterations,
                    "warmup": profile.lock_warmup,
                },
            )
            for variant, label in variants
        ],
    )


def fenced_vendor(profile: Profile, redis_url: str) -> Group:
    variants = [
        ("plain", "plain transaction.atomic() insert, no lock"),
        ("checked", "same checks + insert, no lock"),
        ("service", "ours: assign_vendor service"),
    ]
    return Group(
        id="fenced-vendor",
        title="2a. Fenced write: one vendor assignment",
        baseline="vendor.plain",
        repeats=profile.write_repeats,
        latency_label="per assignment",
        note=f"{profile.vendor_ops} assignments per process, each on a new complaint",
        columns=[
            ("DB round trips", "counts.db_round_trips"),
            ("Redis cmds", "counts.redis_sent_total"),
        ],
        cases=[
            Case(
                id=f"vendor.{variant}",
                label=label,
                entry="bench.cases.fenced_writes:vendor",
                params={"variant": variant, "redis_url": redis_url, "ops": profile.vendor_ops},
            )
            for variant, label in variants
        ],
    )


def fenced_charges(profile: Profile, redis_url: str) -> Group:
    variants = [
        ("bulk_create", "plain transaction.atomic() + bulk_create"),
        ("copy", "PostgreSQL COPY (the insert's floor)"),
        ("service_billed", "ours: generate_monthly_charges, billing call to a stand-in"),
        ("service", "ours, billing URL unset (the fence alone)"),
    ]
    return Group(
        id="fenced-charges",
        title=f"2b. Fenced write: monthly charges for {profile.charge_units:,} units",
        baseline="charges.bulk_create",
        repeats=profile.write_repeats,
        latency_label="per run",
        note=f"{profile.charge_ops} runs per process, each a new month",
        columns=[
            ("DB round trips", "counts.db_round_trips"),
            ("Redis cmds", "counts.redis_sent_total"),
        ],
        cases=[
            Case(
                id=f"charges.{variant}",
                label=label,
                entry="bench.cases.fenced_writes:charges",
                params={
                    "variant": variant,
                    "redis_url": redis_url,
                    "units": profile.charge_units,
                    "ops": profile.charge_ops,
                },
            )
            for variant, label in variants
        ],
    )


def charges_all_orgs(profile: Profile, redis_url: str) -> Group | None:
    if not profile.all_orgs_repeats:
        return None
    return Group(
        id="charges-all-orgs",
        title="2c. generate_monthly_charges --all-orgs: 200 organizations x 100 units",
        baseline="all_orgs.workers_1",
        primary="orgs_per_s",
        higher_is_better=True,
        repeats=profile.all_orgs_repeats,
        latency_label="walk",
        note="one new month per run; the command forks its own workers",
        columns=[("orgs/s", "metrics.orgs_per_s"), ("result", "metrics.result_digest")],
        same_metric="result_digest",
        cases=[
            Case(
                id=f"all_orgs.workers_{workers}",
                label=f"{workers} worker process{'es' if workers > 1 else ''}",
                entry="bench.cases.fenced_writes:all_orgs",
                params={"workers": workers, "orgs": 200, "units": 100},
                timeout=300,
            )
            for workers in (1, 2)
        ],
    )


def alternatives(profile: Profile, redis_url: str) -> Group:
    variants = [
        ("select_for_update", "select_for_update() on the run row"),
        ("select_for_update_nowait", "select_for_update(nowait=True)"),
        ("advisory", "pg_try_advisory_xact_lock"),
        ("ours", "ours: FenceLock, call outside any transaction"),
    ]
    return Group(
        id="alternatives",
        title="3. Without Redis: a loser during the holder's 200 ms external call",
        baseline="alt.select_for_update",
        repeats=profile.alt_repeats,
        latency_label="loser answer",
        note=f"{profile.alt_trials} holder/loser trials per process",
        columns=[
            ("answer", "metrics.loser_answer"),
            ("loser DB trips", "metrics.loser_round_trips"),
            ("idle in txn", "metrics.idle_in_transaction"),
            ("open txns", "metrics.open_transactions"),
        ],
        cases=[
            Case(
                id=f"alt.{variant}",
                label=label,
                entry="bench.cases.alternatives:run",
                params={"variant": variant, "redis_url": redis_url, "trials": profile.alt_trials},
            )
            for variant, label in variants
        ],
    )


def contention(profile: Profile, redis_url: str) -> Group:
    variants = [
        ("solo", "1 process, 1 resource", "backoff", 1, True),
        ("one_backoff", "8 processes, 1 resource: answer + backoff", "backoff", 8, True),
        ("one_wait", "8 processes, 1 resource: acquire(wait=)", "wait", 8, True),
        ("one_naive", "8 processes, 1 resource: naive hot retry", "naive", 8, True),
        ("each", "8 processes, 8 resources", "backoff", 8, False),
    ]
    return Group(
        id="contention",
        title="4. Contention: fenced commits per second",
        baseline="contention.solo",
        primary="ops_per_s",
        higher_is_better=True,
        repeats=profile.contention_repeats,
        latency_label="busy answer",
        note=f"{profile.contention_seconds:g} s per run; critical section = one fenced commit",
        columns=[
            ("ops/s", "metrics.ops_per_s"),
            ("busy/s", "metrics.busy_per_s"),
            ("CPU ms/op", "metrics.client_cpu_ms_per_op"),
            ("machine CPU busy", "metrics.machine_cpu_busy"),
        ],
        cases=[
            Case(
                id=f"contention.{variant}",
                label=label,
                entry="bench.cases.contention:run",
                params={
                    "mode": mode,
                    "processes": processes,
                    "shared": shared,
                    "seconds": profile.contention_seconds,
                    "redis_url": redis_url,
                },
            )
            for variant, label, mode, processes, shared in variants
        ],
    )


def http(profile: Profile, redis_url: str) -> Group:
    return Group(
        id="http",
        title=f"5. HTTP: staff assign endpoint, gunicorn 2 workers, {profile.http_clients} clients",
        repeats=1,
        latency_label="request",
        note=f"{profile.http_seconds:g} s of load on a mix of hot and cold complaints",
        columns=[
            ("req/s", "metrics.requests_per_s"),
            ("409 share", "metrics.share_409"),
            ("5xx", "metrics.http_5xx"),
        ],
        cases=[
            Case(
                id="http.assign",
                label="POST /orgs/<slug>/complaints/<id>/assign/",
                entry="bench.cases.http:run",
                timeout=profile.http_seconds + 120,
                params={
                    "redis_url": redis_url,
                    "seconds": profile.http_seconds,
                    "clients": profile.http_clients,
                },
            )
        ],
    )


def fence_epochs(profile: Profile, redis_url: str) -> Group:
    variants = [
        ("token", "advance_fence(queryset, token): row check"),
        ("lease", "advance_fence(queryset, lease): row + epoch check"),
    ]
    return Group(
        id="fence-epoch",
        title="1b. Fence check with and without the epoch check",
        baseline="fence.token",
        repeats=profile.write_repeats,
        latency_label="per check",
        note=f"{profile.vendor_ops} checks per process on one row, each in its own transaction",
        cases=[
            Case(
                id=f"fence.{variant}",
                label=label,
                entry="bench.cases.epochs:fence",
                params={"variant": variant, "ops": profile.vendor_ops},
            )
            for variant, label in variants
        ],
    )


def grant_costs(profile: Profile, redis_url: str) -> Group:
    variants = [
        ("normal", "grant + release, counter present"),
        ("after_loss", "grant + release, counter just lost (new epoch)"),
        ("wait", "grant + release, LOCK_REDIS_MIN_REPLICAS=1 (WAIT, 1 replica)"),
    ]
    return Group(
        id="grant-cost",
        title="1c. What a grant costs after a loss and with replicas",
        baseline="grant.normal",
        repeats=profile.write_repeats,
        latency_label="cycle",
        note=f"{profile.vendor_ops} cycles per process",
        cases=[
            Case(
                id=f"grant.{variant}",
                label=label,
                entry="bench.cases.epochs:grant",
                params={"variant": variant, "redis_url": redis_url, "ops": profile.vendor_ops},
            )
            for variant, label in variants
        ],
    )


SECTIONS = {
    "lock": [lock_cycle, fence_epochs, grant_costs],
    "writes": [fenced_vendor, fenced_charges, charges_all_orgs],
    "alternatives": [alternatives],
    "contention": [contention],
    "http": [http],
}
