"""What ``make bench`` runs, as data: two profiles (``FULL``, about 30 minutes; ``QUICK``, a
smoke test of 2), a row per group of compared cases with its targets; ``make bench-scale``'s."""

from dataclasses import dataclass, field, make_dataclass, replace

from bench.runner import Case, Group

# fmt: off
_PROFILES = {  #           full   quick
    "lock_repeats":        (7,    1),
    "lock_iterations":     (3000, 800),
    "lock_warmup":         (300,  50),
    "write_repeats":       (5,    1),
    "vendor_ops":          (150,  30),
    "charge_ops":          (2,    1),
    "alt_repeats":         (3,    1),
    "alt_trials":          (10,   2),
    "contention_repeats":  (3,    1),
    "contention_seconds":  (4,    1.2),
    "http_repeats":        (3,    1),
    "http_seconds":        (20,   3),
    "http_timeout":        (140,  123),  # the load, then gunicorn's start and stop
    "associations":        (10_000, 200),  # month start: x 200 units, 2,000,000 charges in full
    "month_start_timeout": (3600, 600),
    "month_start_repeats": (3,    1),  # paired runs: the figures are their median and range
}
# fmt: on
Profile = make_dataclass("Profile", ["name", *_PROFILES], frozen=True)
FULL, QUICK = (
    Profile(name, *(values[column] for values in _PROFILES.values()))
    for column, name in enumerate(("full", "quick"))
)


@dataclass(frozen=True)
class Target:
    """A target: a paired ratio ``case / versus``, or a ``value`` that ``case`` reports."""

    section: str
    text: str
    group: str
    case: str
    op: str  # "<=", ">=" or "=="
    limit: float
    versus: str | None = None
    value: str | None = None  # "metrics.name" or "counts.name" when not a ratio
    report_only: bool = False


@dataclass(frozen=True)
class Row:
    """One group: cases ``<prefix>.<key>``, each a call of ``entry`` in a fresh process.
    ``cases`` maps a key to its label (the case gets ``variant=key``) or to ``(label,
    params)``. A string in ``repeats``, ``timeout`` or ``params`` names a ``Profile`` field;
    ``title`` and ``note`` are formatted with the profile as ``p``. A target is ``(text, case,
    op, limit, against[, profile])``: ``against`` is a case (the paired ratio) or a value
    ("metrics.…"); "(report)" ending a text: never judged; with a profile: judged in it only."""

    section: str  # what ``--only`` selects
    id: str
    prefix: str
    entry: str
    repeats: str | int
    title: str
    note: str
    cases: dict
    baseline: str | None = None  # a case key
    params: dict = field(default_factory=dict)
    targets: tuple = ()
    redis: bool = True  # the case gets ``redis_url``
    django: bool = True
    timeout: str | int = 180
    latency_label: str = "cycle"
    columns: dict = field(default_factory=dict)  # header: "metrics.…" / "counts.…"
    primary: str = "latency"
    higher_is_better: bool = False

    def target(self, text: str, case: str, op: str, limit: float, against: str, *_) -> Target:
        value = against if against.startswith(("counts.", "metrics.")) else None
        versus = None if value else f"{self.prefix}.{against}"
        case, report_only = f"{self.prefix}.{case}", text.endswith("(report)")
        return Target(self.title[0], text, self.id, case, op, limit, versus, value, report_only)


_TRIPS = {"DB round trips": "counts.db_round_trips", "Redis cmds": "counts.redis_sent_total"}
# fmt: off
GROUPS = (
    Row("lock", "lock-cycle", "lock", "bench.cases.lock_cycle:run", "lock_repeats",
        "1. Lock cycle: acquire + release, one client, loopback",
        "{p.lock_iterations} cycles per process after {p.lock_warmup} warm-up",
        {"ping": "PING (one round trip: the floor)", "seed": "seed design: SETNX + INCR + DEL",
         "redis_py": "redis-py Lock (no token)",
         "python_redis_lock": "python-redis-lock (no token)",
         "pottery": "pottery Redlock, 1 master (no token)",
         "scripts_only": "our 2 Lua scripts, bare (floor)",
         "ours": "ours: FenceLock (token issued)",
         "ours_fsync_always": "ours, appendfsync always (report)"},
        baseline="redis_py", django=False,
        params={"iterations": "lock_iterations", "warmup": "lock_warmup"},
        columns={"Redis cmds sent": "counts.redis_sent_total",
                 "executed": "counts.redis_executed_total"},
        targets=(
            ("ours ≤ 1.1x redis-py Lock", "ours", "<=", 1.1, "redis_py"),
            ("ours ≤ 0.8x python-redis-lock", "ours", "<=", 0.8, "python_redis_lock"),
            ("ours ≤ 0.4x pottery Redlock", "ours", "<=", 0.4, "pottery"),
            ("ours ≤ 2.6x one PING", "ours", "<=", 2.6, "ping"),
            ("floor: our 2 scripts, bare, vs one PING (report)", "scripts_only", "<=", 0, "ping"),
            ("ours ≤ 1.05x our 2 scripts called bare", "ours", "<=", 1.05, "scripts_only"),
            ("ours sends 2 Redis commands per cycle", "ours", "==", 2, "counts.redis_sent_total"),
            ("ours with appendfsync always vs default durability (report)",
             "ours_fsync_always", "<=", 0, "ours"))),
    Row("lock", "lease-state", "lease_state", "bench.cases.lock_cycle:lease_reads", "lock_repeats",
        "1d. Reading a held lease: lease.state and lease.check() vs an attribute",
        "{p.lock_iterations} samples of 1,000 reads per process (µs per sample = ns per read)",
        {"token": "lease.token (an attribute read: the floor)",
         "state": "lease.state (monotonic clock + comparisons)",
         "check": "lease.check() (reads the state)"},
        baseline="token", django=False, latency_label="per 1,000 reads",
        params={"iterations": "lock_iterations", "warmup": "lock_warmup"},
        targets=(("lease.state vs an attribute read (report)", "state", "<=", 0, "token"),
                 ("lease.check() vs an attribute read (report)", "check", "<=", 0, "token"))),
    Row("lock", "fence-epoch", "fence", "bench.cases.epochs:fence", "write_repeats",
        "1b. Fence check: the row's conditional UPDATE alone vs the fence (claim + row)",
        "{p.vendor_ops} checks per process on one row, each in its own transaction",
        {"token": "UPDATE … WHERE last_fence_token < token (the row alone)",
         "lease": "advance_fence(queryset, lease): the resource's record + the row"},
        baseline="token", params={"ops": "vendor_ops"}, redis=False, latency_label="per check",
        targets=(("fence (claim + row) vs the row's UPDATE alone (report)",
                  "lease", "<=", 0, "token"),)),
    Row("lock", "grant-cost", "grant", "bench.cases.epochs:grant", "write_repeats",
        "1c. What a grant costs after a loss and with replicas",
        "{p.vendor_ops} cycles per process",
        {"normal": "grant + release, counter present",
         "after_loss": "grant + release, counter just lost (new epoch)",
         "wait": "grant + release, LOCK_REDIS_MIN_REPLICAS=1 (WAIT, 1 replica)"},
        baseline="normal", params={"ops": "vendor_ops"},
        targets=(("first grant after a loss (new epoch) vs a normal grant (report)",
                  "after_loss", "<=", 0, "normal"),
                 ("grant with WAIT for 1 replica vs a normal grant (report)", "wait", "<=", 0,
                  "normal"))),
    Row("lock", "floor", "floor", "bench.cases.floor:run", "write_repeats",
        "1e. One fenced write vs the same write in Django's atomic(), and vs the floor "
        "(2 Redis RTT + 1 PostgreSQL RTT + 1 durable commit)",
        "{p.vendor_ops} rounds per process of PING, SELECT 1, a one-row INSERT (autocommit, "
        "synchronous_commit on), a run_fenced write (grant, fence, row, audit row, commit, "
        "release), the same row and audit row in atomic() without a fence, and two probes "
        "(the fenced write step by step; with the fence and the audit row in one statement)",
        {"fenced": "ours: run_fenced, one row + its audit row"},
        params={"ops": "vendor_ops"}, latency_label="per write",
        columns={"Django µs": "metrics.django_us", "x Django": "metrics.django_multiple",
                 "floor µs": "metrics.floor_us", "PING": "metrics.ping_us",
                 "SELECT 1": "metrics.select1_us", "commit": "metrics.commit_us",
                 "x floor": "metrics.floor_multiple", "DB trips": "counts.db_round_trips",
                 "fused saves µs": "metrics.fused_saves_us"},
        targets=(("fenced write ≤ 1.5x the same write in Django's atomic() (row + audit row)",
                  "fenced", "<=", 1.5, "metrics.django_multiple"),
                 ("fenced write ≤ 1.5x the floor (2 PING + SELECT 1 + durable commit)",
                  "fenced", "<=", 1.5, "metrics.floor_multiple"))),
    Row("writes", "fenced-vendor", "vendor", "bench.cases.fenced_writes:vendor", "write_repeats",
        "2a. Fenced write: one vendor assignment, first and reassignment",
        "{p.vendor_ops} assignments per process: on a new complaint each (first), or "
        "replacing the vendor of a complaint assigned before the clock started (reassign)",
        {"plain": "plain transaction.atomic() insert, no lock",
         "checked": "first: same checks + insert, no lock",
         "service": "ours, first: assign_vendor (records the first epoch)",
         "checked_reassign": "reassign: same checks, replace, no lock",
         "service_reassign": "ours, reassign: assign_vendor(reassign=True)"},
        baseline="plain", params={"ops": "vendor_ops"}, latency_label="per assignment",
        columns=_TRIPS,
        targets=(
            ("vendor assignment via service ≤ 1.5x plain transaction", "service", "<=", 1.5,
             "plain"),
            ("vendor reassignment: service ≤ 1.5x the same checks without lock, fence, audit",
             "service_reassign", "<=", 1.5, "checked_reassign"),
            ("vendor first assignment vs its checks, with its first epoch (report)",
             "service", "<=", 0, "checked"))),
    Row("writes", "fenced-charges", "charges", "bench.cases.fenced_writes:charges", "write_repeats",
        "2b. Fenced write: monthly charges for 5,000 units",
        "{p.charge_ops} runs per process, each a new month",
        {"bulk_create": "plain transaction.atomic() + bulk_create",
         "copy": "PostgreSQL COPY (the insert's floor)",
         "service_billed": "ours: generate_monthly_charges, billing call to a stand-in",
         "service": "ours, billing URL unset (the fence alone)"},
        baseline="bulk_create", params={"units": 5000, "ops": "charge_ops"},
        latency_label="per run", columns=_TRIPS,
        targets=(
            ("charge generation (5,000 units, billed, COPY) ≤ 0.6x plain bulk_create",
             "service_billed", "<=", 0.6, "bulk_create"),
            ("charge generation, billing URL unset, vs bulk_create (report)",
             "service", "<=", 0, "bulk_create"),
            ("charge generation (billed) vs COPY (report)", "service_billed", "<=", 0, "copy"))),
    Row("writes", "fenced-payment", "payment", "bench.cases.fenced_writes:payment",
        "write_repeats", "2c. Fenced write: paying an approved invoice",
        "{p.vendor_ops} payments per process, each of a new approved invoice, to a stand-in "
        "payment service on loopback",
        {"checked": "same checks and steps, no lease, fence, audit",
         "service": "ours: pay_invoice"},
        baseline="checked", params={"ops": "vendor_ops"}, latency_label="per payment",
        columns=_TRIPS,
        targets=(("invoice payment: pay_invoice ≤ 1.5x the same checks without lock, fence, "
                  "audit", "service", "<=", 1.5, "checked"),)),
    Row("month-start", "month-start", "month_start", "bench.cases.fenced_writes:month_start",
        "month_start_repeats",
        "2d. Month start: {p.associations:,} associations x 200 units, one new month",
        "fixture written with COPY; billing to a local stand-in; wall time of the whole month; "
        "1, 2 (ours) and 4 worker processes: the capacity model's check (docs/capacity.md)",
        {"baseline": "plain: 2 processes, per association COPY in one transaction",
         "ours": "ours: generate_monthly_charges --all-orgs --workers 2",
         "two_hosts": "two hosts: 2 of those commands at once",
         "workers_1": ("ours, --workers 1", {"variant": "ours", "workers": 1}),
         "workers_4": ("ours, --workers 4", {"variant": "ours", "workers": 4})},
        baseline="baseline", params={"associations": "associations"}, redis=False,
        timeout="month_start_timeout", latency_label="wall",
        columns={"assoc/s": "metrics.associations_per_s", "charges/s": "metrics.charges_per_s",
                 "peak MB": "metrics.peak_rss_mb", "exit codes": "metrics.exit_codes"},
        targets=(
            ("month start: ours ≤ 1.3x the plain COPY loop", "ours", "<=", 1.3, "baseline"),
            ("month start: 2,000,000 charges ≤ 90 s wall",
             "ours", "<=", 90, "metrics.seconds", "full"),
            ("month start: peak memory ≤ 250 MB per worker (any process)",
             "ours", "<=", 250, "metrics.peak_rss_mb"),
            ("month start: two hosts at once vs one (report)", "two_hosts", "<=", 0, "ours"),
            ("month start: 2 workers ≥ 1.6x one (one worker's wall over two's)",
             "workers_1", ">=", 1.6, "ours"),
            ("month start: 4 workers vs one (one worker's wall over four's) (report)",
             "workers_1", ">=", 0, "workers_4"))),
    Row("alternatives", "alternatives", "alt", "bench.cases.alternatives:run", "alt_repeats",
        "3. Without Redis: a loser during the holder's 200 ms external call",
        "{p.alt_trials} holder/loser trials per process",
        {"select_for_update": "select_for_update() on the run row",
         "select_for_update_nowait": "select_for_update(nowait=True)",
         "advisory": "pg_try_advisory_xact_lock",
         "ours": "ours: FenceLock, call outside any transaction"},
        baseline="select_for_update", params={"trials": "alt_trials"},
        latency_label="loser answer",
        columns={"answer": "metrics.loser_answer", "loser DB trips": "metrics.loser_round_trips",
                 "idle in txn": "metrics.idle_in_transaction",
                 "open txns": "metrics.open_transactions"},
        targets=(
            ("our loser answered ≤ 3x one uncontended acquire", "ours", "<=", 3.0,
             "metrics.loser_vs_acquire"),
            ("our loser does zero database round trips", "ours", "==", 0,
             "metrics.loser_round_trips"))),
    Row("contention", "contention", "contention", "bench.cases.contention:run",
        "contention_repeats", "4. Contention: fenced commits per second",
        "{p.contention_seconds:g} s per run; critical section = one fenced commit",
        {"solo": ("1 process, 1 resource", {"mode": "backoff", "processes": 1, "shared": True}),
         "one_backoff": ("8 processes, 1 resource: answer + backoff",
                         {"mode": "backoff", "processes": 8, "shared": True}),
         "one_wait": ("8 processes, 1 resource: acquire(wait=)",
                      {"mode": "wait", "processes": 8, "shared": True}),
         "one_naive": ("8 processes, 1 resource: naive hot retry",
                       {"mode": "naive", "processes": 8, "shared": True}),
         "each": ("8 processes, 8 resources",
                  {"mode": "backoff", "processes": 8, "shared": False})},
        baseline="solo", params={"seconds": "contention_seconds"},
        latency_label="busy answer", primary="ops_per_s", higher_is_better=True,
        columns={"ops/s": "metrics.ops_per_s", "busy/s": "metrics.busy_per_s",
                 "CPU ms/op": "metrics.client_cpu_ms_per_op",
                 "machine CPU busy": "metrics.machine_cpu_busy"},
        targets=(
            ("8 resources x 8 processes ≥ 1.6x one client", "each", ">=", 1.6, "solo"),
            ("8-way on one resource, answer + backoff: ≥ 0.8x solo",
             "one_backoff", ">=", 0.8, "solo"),
            ("8-way on one resource, acquire(wait=): ≥ 0.8x solo", "one_wait", ">=", 0.8, "solo"),
            ("8-way on one resource, naive hot retry (report)", "one_naive", ">=", 0, "solo"))),
    Row("http", "http", "http", "bench.cases.http:run", "http_repeats",
        "5. HTTP: staff assign endpoint, gunicorn 2 workers, 16 clients",
        "{p.http_seconds:g} s of load per case on a mix of hot and cold complaints",
        {"assign": "ours: POST /orgs/<slug>/complaints/<id>/assign/",
         "baseline": "the same view, checks and insert: no lease, fence, audit"},
        baseline="baseline", params={"seconds": "http_seconds", "clients": 16},
        timeout="http_timeout", latency_label="request", primary="requests_per_s",
        higher_is_better=True,
        columns={"req/s": "metrics.requests_per_s", "409 share": "metrics.share_409",
                 "CPU ms/req": "metrics.server_cpu_ms_per_request", "5xx": "metrics.http_5xx"},
        targets=(
            ("HTTP: fenced endpoint throughput ≥ 0.85x the no-fence baseline",
             "assign", ">=", 0.85, "baseline"),
            ("HTTP: no 5xx under 16 clients", "assign", "==", 0, "metrics.http_5xx"))),
)
# fmt: on
SECTIONS = tuple(dict.fromkeys(row.section for row in GROUPS))

# make bench-scale (bench.scale): group 2d's loop and ours at each scale.
SCALES = (1_000, 10_000, 100_000)
SCALE_REPEATS = 3
SCALE_CASES = ("baseline", "ours")
# A case's timeout, in seconds: fixed, and per association (a machine 5x slower than estimated).
SCALE_TIMEOUT = (600, 0.06)
# The estimate before any run has measured its own (docs/benchmarks.md, "Before it starts"):
# disk at 1,000 and 10,000 associations, time per case from the full make bench of 2026-12-05.
SCALE_COST = {"seconds_per_case": 10.0, "seconds_per_association": 0.006,
              "bytes_fixed": 270_000_000, "bytes_per_association": 145_000}  # fmt: skip
SCALE_GOALS = {
    "ratio": 1.3,  # ours over the plain loop, at every scale
    "cost_growth": 1.1,  # ours per association: the largest scale over the next smaller
    "rss_growth": 1.2,  # ours' peak RSS: the largest scale over the smallest
}


def scale_group(associations: int, repeats: int) -> Group:
    """The loop and ours at ``associations`` x 200 units, ``repeats`` paired runs."""
    [row] = (row for row in GROUPS if row.id == "month-start")
    fixed, per_association = SCALE_TIMEOUT
    scaled = replace(
        row, id=f"scale-{associations}", prefix="scale", repeats=repeats,
        title=f"Month start: {associations:,} associations x 200 units",
        note="paired runs in make bench-scale's own database; statements and plans recorded",
        cases={key: row.cases[key] for key in SCALE_CASES},
        params={"associations": associations, "diagnosis": True, "cleanup": "truncate"},
        timeout=fixed + per_association * associations,
    )  # fmt: skip
    return group(scaled, FULL, redis_url="")


def targets(profile: Profile) -> list[Target]:
    judged = ((), (profile.name,))
    return [row.target(*t) for row in GROUPS for t in row.targets if t[5:] in judged]


def _value(profile: Profile, value):  # a string names a field of ``profile``, if it has one
    return getattr(profile, value, value) if isinstance(value, str) else value


def group(row: Row, profile: Profile, redis_url: str) -> Group | None:
    """The runnable group of ``row`` for ``profile``; None if the profile leaves it out."""
    repeats = _value(profile, row.repeats)
    if not repeats:
        return None
    shared = {name: _value(profile, value) for name, value in row.params.items()}
    if row.redis:
        shared["redis_url"] = redis_url
    timeout = _value(profile, row.timeout)
    cases = []
    for key, spec in row.cases.items():
        label, own = spec if isinstance(spec, tuple) else (spec, {"variant": key})
        cases.append(Case(f"{row.prefix}.{key}", label, row.entry, {**own, **shared}, row.django,
                          timeout))  # fmt: skip
    title, note = row.title.format(p=profile), row.note.format(p=profile)
    baseline = f"{row.prefix}.{row.baseline}" if row.baseline else None
    shown = {name: getattr(row, name) for name in ("primary", "higher_is_better", "latency_label")}
    return Group(row.id, title, cases, repeats, baseline, note=note,
                 columns=list(row.columns.items()), **shown)  # fmt: skip


def build(section: str, profile: Profile, redis_url: str) -> list[Group]:
    found = (group(row, profile, redis_url) for row in GROUPS if row.section == section)
    return [built for built in found if built is not None]
