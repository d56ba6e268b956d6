"""Targets, the printed tables and the JSON file. A target is PASS or MISS (a speed); a
broken invariant or a crashed case is FAIL (a wrong result), the only thing that fails the run.
"""

import json
import math
import operator
import os
from pathlib import Path
from statistics import median

from bench.plan import Target

_OPS = {"<=": operator.le, ">=": operator.ge, "==": math.isclose}


def _lookup(node: dict, path: str):
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _measure(target: Target, row: dict, other: dict | None):
    if not target.versus:
        return _lookup(row, target.value)
    values = zip(row["per_repeat_value"], other["per_repeat_value"], strict=False)
    paired = [mine / theirs for mine, theirs in values if mine is not None and theirs]
    return median(paired) if paired else None


def evaluate(targets: list[Target], groups: list[dict]) -> list[dict]:
    """Measure each target against the groups' rows; SKIP where its group did not run."""
    rows = {(g["id"], row["case"]): row for g in groups for row in g["rows"]}
    evaluated = []
    for target in targets:
        entry = {key: getattr(target, key) for key in ("section", "text", "op", "limit")}
        entry.update(measured=None, status="SKIP", report_only=target.report_only)
        evaluated.append(entry)
        row = rows.get((target.group, target.case))
        other = rows.get((target.group, target.versus)) if target.versus else None
        if row is None or (target.versus and other is None):
            continue
        if error := row.get("error") or (other and other.get("error")):
            entry.update(status="FAIL", detail=error)
        elif (measured := _measure(target, row, other)) is None:
            entry.update(status="MISS", detail="not measured")
        elif target.report_only:
            entry.update(status="INFO", measured=round(float(measured), 3))
        else:
            met = _OPS[target.op](float(measured), target.limit)
            entry.update(status="PASS" if met else "MISS", measured=round(float(measured), 3))
    return evaluated


def invariant_failures(groups: list[dict]) -> list[str]:
    failures = []
    for row in (row for group in groups for row in group["rows"]):
        if row.get("error"):
            failures.append(f"{row['case']}: crashed: {row['error'].splitlines()[0]}")
        failures.extend(
            f"{row['case']}: {check['name']}: {check['detail']}"
            for check in row["invariants"]
            if not check["ok"]
        )
    return failures


def fmt_us(value: float | None) -> str:
    if value is None:
        return "-"
    for at_least, digits in ((100_000, 0), (10_000, 1), (1000, 2)):
        if value >= at_least:
            return f"{value / 1000:.{digits}f} ms"
    return f"{value:.0f} µs"


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e6:
            return f"{value:.0f}"
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def _table(headers: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in pairs)

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *map(line, lines)])


def group_table(group: dict) -> str:
    baseline, latency = group["baseline"], group["latency_label"]
    title = f"{group['title']}  [{group['repeats']} repeat(s); {group['note']}]"
    for row in group["rows"]:
        if row["case"] == baseline and group["primary"] != "latency":
            title += f"\n(x baseline: {group['primary']} relative to '{row['label']}')"
    headers = ["case", *([f"{latency} p50", "p99"] if latency else [])]
    headers += ["x baseline"] if baseline else []
    headers += [header for header, _ in group["columns"]]
    lines = []
    for row in group["rows"]:
        is_baseline = row["case"] == baseline
        if row.get("error"):
            lines.append([row["label"], "ERROR", *["-"] * (len(headers) - 2)])
            continue
        line = [row["label"] + (" (baseline)" if is_baseline else "")]
        line += [fmt_us(row["median_us"]), fmt_us(row["p99_us"])] if latency else []
        line += ["1" if is_baseline else _fmt(row["ratio"])] if baseline else []
        line += [_fmt(_lookup(row, path)) for _, path in group["columns"]]
        lines.append(line)
    return title + "\n" + _table(headers, lines)


def targets_table(evaluated: list[dict]) -> str:
    def measured(entry: dict) -> str:
        if entry["status"] == "SKIP":
            return "not run"
        return entry.get("detail", "-") if entry["measured"] is None else _fmt(entry["measured"])

    def limit(entry: dict) -> str:
        return "-" if entry["report_only"] else f"{entry['op']} {_fmt(entry['limit'])}"

    lines = [
        [f"{e['section']}. {e['text']}", measured(e), limit(e), e["status"]] for e in evaluated
    ]
    return "Targets (ratios are medians of per-repeat paired ratios)\n" + _table(
        ["target", "measured", "limit", "status"], lines
    )


_SUMMARY = """\
Machine: {m[cpu]}, {m[cpus_usable]} CPUs, {m[memory_gib]} GiB, load {m[loadavg]} at start, \
{m[platform]}
Python {v[python]}, Django {v[Django]}, redis-py {v[redis]} ({v[redis_parser]} parser), \
psycopg {v[psycopg]} (libpq {v[libpq]}), Redis {v[redis_server]}, PostgreSQL \
{v[postgresql_server]}, python-redis-lock {v[python-redis-lock]}, pottery {v[pottery]}, \
gunicorn {v[gunicorn]}
Redis durability: appendonly={r[appendonly]}, appendfsync={r[appendfsync]}, save='{r[save]}'; \
PostgreSQL: fsync={p[fsync]}, synchronous_commit={p[synchronous_commit]}, \
wal_sync_method={p[wal_sync_method]}"""


def environment_summary(environment: dict) -> str:
    durability = environment["durability"]
    m, v = environment["machine"], environment["versions"]
    return _SUMMARY.format(m=m, v=v, r=durability["redis"], p=durability["postgresql"])


def write_json(path: Path, document: dict) -> None:
    """Write ``document`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    os.replace(temporary, path)


def text(document: dict) -> str:
    """A run as ``python -m bench`` prints it: machine, one table per group, targets."""
    if failures := document["invariant_failures"]:
        invariants = "\n".join(["Invariants: FAIL", *(f"  FAIL {failure}" for failure in failures)])
    else:
        checks = sum(len(row["invariants"]) for g in document["groups"] for row in g["rows"])
        invariants = (
            f"Invariants: all {checks} checks held (no overlap, tokens increasing, exactly once)"
        )
    tables = [group_table(group) for group in document["groups"]]
    summary = environment_summary(document["environment"])
    return "\n\n".join([summary, *tables, targets_table(document["targets"]), invariants])


if __name__ == "__main__":  # python -m bench.report bench/results/full.json: for the docs
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m bench.report RESULTS.json (prints it for docs/benchmarks.md)")
    run = json.loads(Path(sys.argv[1]).read_text())
    print(f"Run `{run['name']}` of {run['started_at']} ({run['seconds']:.0f} s):\n")
    print(f"```text\n{text(run)}\n```")
