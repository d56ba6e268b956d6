"""What ``make bench`` runs, as data: two profiles, a table of groups, a table of targets.

``GROUPS`` has one row per group of cases that are compared with each other; ``build``
turns the rows of a section into runnable ``Group``s for a profile. ``TARGETS`` has one
row per target of issue 10. ``FULL`` takes about 6-10 minutes on the 2-core machine,
``QUICK`` under a minute (fewer repeats, shorter loops: a smoke test, not a result).
"""

from dataclasses import dataclass, field

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
    http_clients: int

    @property
    def http_timeout(self) -> float:
        return self.http_seconds + 120


# fmt: off
_PROFILES = {  #           full   quick
    "lock_repeats":        (7,    1),
    "lock_iterations":     (3000, 800),
    "lock_warmup":         (300,  50),
    "write_repeats":       (5,    1),
    "vendor_ops":          (150,  30),
    "charge_units":        (5000, 5000),
    "charge_ops":          (2,    1),
    "all_orgs_repeats":    (3,    0),  # 0: the group is not part of the profile
    "alt_repeats":         (3,    1),
    "alt_trials":          (10,   2),
    "contention_repeats":  (3,    1),
    "contention_seconds":  (4,    1.2),
    "http_seconds":        (20,   3),
    "http_clients":        (16,   16),
}
# fmt: on
FULL, QUICK = (
    Profile(name, **{key: values[column] for key, values in _PROFILES.items()})
    for column, name in enumerate(("full", "quick"))
)


@dataclass(frozen=True)
class Row:
    """One group: cases ``<prefix>.<key>``, each a call of ``entry`` in a fresh process.

    ``cases`` maps a key to its label (the case gets ``variant=key``) or to ``(label,
    params)``. A string in ``repeats``, ``timeout`` or a value of ``params`` names a
    ``Profile`` field; ``title`` and ``note`` are formatted with the profile as ``p``.
    The title's first digit is the section of issue 10 that the group answers.
    """

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
    redis: bool = True  # the case gets ``redis_url``
    django: bool = True
    timeout: str | int = 180
    latency_label: str = "cycle"
    columns: dict = field(default_factory=dict)  # header: "metrics.…" / "counts.…"
    primary: str = "latency"
    higher_is_better: bool = False
    same_metric: str | None = None


_TRIPS = {"DB round trips": "counts.db_round_trips", "Redis cmds": "counts.redis_sent_total"}
# Row(section, id, prefix, entry, repeats, title, note, cases, options…)
# fmt: off
GROUPS = (
    Row("lock", "lock-cycle", "lock", "bench.cases.lock_cycle:run", "lock_repeats",
        "1. Lock cycle: acquire + release, one client, loopback",
        "{p.lock_iterations} cycles per process after {p.lock_warmup} warm-up",
        {"ping": "PING (one round trip: the floor)",
         "seed": "seed design: SETNX + INCR + DEL",
         "redis_py": "redis-py Lock (no token)",
         "python_redis_lock": "python-redis-lock (no token)",
         "pottery": "pottery Redlock, 1 master (no token)",
         "scripts_only": "our 2 Lua scripts, bare (floor)",
         "ours": "ours: FenceLock (token issued)",
         "ours_fsync_always": "ours, appendfsync always (report)"},
        baseline="redis_py", django=False,
        params={"iterations": "lock_iterations", "warmup": "lock_warmup"},
        columns={"Redis cmds sent": "counts.redis_sent_total",
                 "executed": "counts.redis_executed_total"}),
    Row("lock", "fence-epoch", "fence", "bench.cases.epochs:fence", "write_repeats",
        "1b. Fence check with and without the epoch check",
        "{p.vendor_ops} checks per process on one row, each in its own transaction",
        {"token": "advance_fence(queryset, token): row check",
         "lease": "advance_fence(queryset, lease): row + epoch check"},
        baseline="token", params={"ops": "vendor_ops"}, redis=False, latency_label="per check"),
    Row("lock", "grant-cost", "grant", "bench.cases.epochs:grant", "write_repeats",
        "1c. What a grant costs after a loss and with replicas",
        "{p.vendor_ops} cycles per process",
        {"normal": "grant + release, counter present",
         "after_loss": "grant + release, counter just lost (new epoch)",
         "wait": "grant + release, LOCK_REDIS_MIN_REPLICAS=1 (WAIT, 1 replica)"},
        baseline="normal", params={"ops": "vendor_ops"}),
    Row("writes", "fenced-vendor", "vendor", "bench.cases.fenced_writes:vendor", "write_repeats",
        "2a. Fenced write: one vendor assignment",
        "{p.vendor_ops} assignments per process, each on a new complaint",
        {"plain": "plain transaction.atomic() insert, no lock",
         "checked": "same checks + insert, no lock",
         "service": "ours: assign_vendor service"},
        baseline="plain", params={"ops": "vendor_ops"}, latency_label="per assignment",
        columns=_TRIPS),
    Row("writes", "fenced-charges", "charges", "bench.cases.fenced_writes:charges", "write_repeats",
        "2b. Fenced write: monthly charges for {p.charge_units:,} units",
        "{p.charge_ops} runs per process, each a new month",
        {"bulk_create": "plain transaction.atomic() + bulk_create",
         "copy": "PostgreSQL COPY (the insert's floor)",
         "service_billed": "ours: generate_monthly_charges, billing call to a stand-in",
         "service": "ours, billing URL unset (the fence alone)"},
        baseline="bulk_create", params={"units": "charge_units", "ops": "charge_ops"},
        latency_label="per run", columns=_TRIPS),
    Row("writes", "charges-all-orgs", "all_orgs", "bench.cases.fenced_writes:all_orgs",
        "all_orgs_repeats",
        "2c. generate_monthly_charges --all-orgs: 200 organizations x 100 units",
        "one new month per run; the command forks its own workers",
        {"workers_1": ("1 worker process", {"workers": 1}),
         "workers_2": ("2 worker processes", {"workers": 2})},
        baseline="workers_1", params={"orgs": 200, "units": 100}, redis=False, timeout=300,
        latency_label="walk", primary="orgs_per_s", higher_is_better=True,
        columns={"orgs/s": "metrics.orgs_per_s", "result": "metrics.result_digest"},
        same_metric="result_digest"),
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
                 "open txns": "metrics.open_transactions"}),
    Row("contention", "contention", "contention", "bench.cases.contention:run",
        "contention_repeats",
        "4. Contention: fenced commits per second",
        "{p.contention_seconds:g} s per run; critical section = one fenced commit",
        {"solo": ("1 process, 1 resource",
                  {"mode": "backoff", "processes": 1, "shared": True}),
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
                 "machine CPU busy": "metrics.machine_cpu_busy"}),
    Row("http", "http", "http", "bench.cases.http:run", 1,
        "5. HTTP: staff assign endpoint, gunicorn 2 workers, {p.http_clients} clients",
        "{p.http_seconds:g} s of load on a mix of hot and cold complaints",
        {"assign": ("POST /orgs/<slug>/complaints/<id>/assign/", {})},
        params={"seconds": "http_seconds", "clients": "http_clients"}, timeout="http_timeout",
        latency_label="request",
        columns={"req/s": "metrics.requests_per_s", "409 share": "metrics.share_409",
                 "5xx": "metrics.http_5xx"}),
)
# fmt: on
SECTIONS = tuple(dict.fromkeys(row.section for row in GROUPS))


def _value(profile: Profile, value):
    return getattr(profile, value) if isinstance(value, str) else value


def group(row: Row, profile: Profile, redis_url: str) -> Group | None:
    """The runnable group of ``row`` for ``profile``; None if the profile leaves it out."""
    repeats = _value(profile, row.repeats)
    if not repeats:
        return None
    shared = {name: _value(profile, value) for name, value in row.params.items()}
    if row.redis:
        shared["redis_url"] = redis_url
    cases = []
    for key, spec in row.cases.items():
        label, own = spec if isinstance(spec, tuple) else (spec, {"variant": key})
        params = {**own, **shared}
        timeout = _value(profile, row.timeout)
        cases.append(Case(f"{row.prefix}.{key}", label, row.entry, params, row.django, timeout))
    return Group(
        id=row.id,
        title=row.title.format(p=profile),
        cases=cases,
        repeats=repeats,
        baseline=f"{row.prefix}.{row.baseline}" if row.baseline else None,
        primary=row.primary,
        higher_is_better=row.higher_is_better,
        note=row.note.format(p=profile),
        latency_label=row.latency_label,
        columns=list(row.columns.items()),
        same_metric=row.same_metric,
    )


def build(section: str, profile: Profile, redis_url: str) -> list[Group]:
    """The groups of ``section`` that ``profile`` runs, in plan order."""
    found = (group(row, profile, redis_url) for row in GROUPS if row.section == section)
    return [built for built in found if built is not None]


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


# One row per target: (text, case, op, limit, against). ``against`` is another case (the
# target is the paired ratio of the two) or a value path ("counts.…", "metrics.…"). A text
# that ends in "(report)" is printed, never judged.
# fmt: off
_TARGET_ROWS = (
    ("ours ≤ 1.0x redis-py Lock", "lock.ours", "<=", 1.0, "lock.redis_py"),
    ("ours ≤ 0.8x python-redis-lock", "lock.ours", "<=", 0.8, "lock.python_redis_lock"),
    ("ours ≤ 0.4x pottery Redlock", "lock.ours", "<=", 0.4, "lock.pottery"),
    ("ours ≤ 2.6x one PING", "lock.ours", "<=", 2.6, "lock.ping"),
    ("floor: our 2 scripts, bare, vs one PING (report)",
     "lock.scripts_only", "<=", 0, "lock.ping"),
    ("ours vs that floor (report)", "lock.ours", "<=", 0, "lock.scripts_only"),
    ("ours sends 2 Redis commands per cycle", "lock.ours", "==", 2, "counts.redis_sent_total"),
    ("ours with appendfsync always vs default durability (report)",
     "lock.ours_fsync_always", "<=", 0, "lock.ours"),
    ("fence check with the epoch check vs without (report)",
     "fence.lease", "<=", 0, "fence.token"),
    ("first grant after a loss (new epoch) vs a normal grant (report)",
     "grant.after_loss", "<=", 0, "grant.normal"),
    ("grant with WAIT for 1 replica vs a normal grant (report)",
     "grant.wait", "<=", 0, "grant.normal"),
    ("vendor assignment via service ≤ 1.5x plain transaction",
     "vendor.service", "<=", 1.5, "vendor.plain"),
    ("vendor: service vs the same checks without a lock (report)",
     "vendor.service", "<=", 0, "vendor.checked"),
    ("charge generation (5,000 units, billed) ≤ 1.25x plain bulk_create",
     "charges.service_billed", "<=", 1.25, "charges.bulk_create"),
    ("charge generation, billing URL unset, vs bulk_create (report)",
     "charges.service", "<=", 0, "charges.bulk_create"),
    ("charge generation (billed) vs COPY (report)",
     "charges.service_billed", "<=", 0, "charges.copy"),
    ("--all-orgs, 200 orgs x 100 units: 2 workers >= 1.6x one",
     "all_orgs.workers_2", ">=", 1.6, "all_orgs.workers_1"),
    ("our loser answered ≤ 3x one uncontended acquire",
     "alt.ours", "<=", 3.0, "metrics.loser_vs_acquire"),
    ("our loser does zero database round trips",
     "alt.ours", "==", 0, "metrics.loser_round_trips"),
    ("8 resources x 8 processes ≥ 1.6x one client",
     "contention.each", ">=", 1.6, "contention.solo"),
    ("8-way on one resource, answer + backoff: ≥ 0.8x solo",
     "contention.one_backoff", ">=", 0.8, "contention.solo"),
    ("8-way on one resource, acquire(wait=): ≥ 0.8x solo",
     "contention.one_wait", ">=", 0.8, "contention.solo"),
    ("8-way on one resource, naive hot retry (report)",
     "contention.one_naive", ">=", 0, "contention.solo"),
    ("HTTP: no 5xx under 16 clients", "http.assign", "==", 0, "metrics.http_5xx"),
)
# fmt: on


def _target(text: str, case: str, op: str, limit: float, against: str) -> Target:
    row = next(row for row in GROUPS if case.startswith(row.prefix + "."))
    is_value = against.startswith(("counts.", "metrics."))
    return Target(
        section=row.title[0],
        text=text,
        group=row.id,
        case=case,
        op=op,
        limit=limit,
        versus=None if is_value else against,
        value=against if is_value else None,
        report_only=text.endswith("(report)"),
    )


TARGETS = [_target(*row) for row in _TARGET_ROWS]
