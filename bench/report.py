"""Targets, the printed table and the JSON file.

A target is PASS or MISS (a measured speed); a broken invariant is FAIL (a wrong result),
and so is a case that crashed. ``python -m bench`` exits non-zero only on FAIL: a missed
speed target is a finding to explain, not a broken build.
"""

import json
import math
import operator
import os
from pathlib import Path
from statistics import median

from bench.plan import Target

_OPS = {"<=": operator.le, ">=": operator.ge, "==": math.isclose}
_SYMBOLS = {"<=": "≤", ">=": "≥", "==": "="}


def _lookup(row: dict, path: str):
    node = row
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
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
        entry = {
            "section": target.section,
            "text": target.text,
            "op": target.op,
            "limit": target.limit,
            "measured": None,
            "status": "SKIP",
            "report_only": target.report_only,
        }
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


# -- printing ----------------------------------------------------------------------------


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


def _md_table(headers: list[str], lines: list[list[str]]) -> str:
    align = ["---"] + ["---:"] * (len(headers) - 1)

    def cell(text: str) -> str:
        # A "|" ends a cell; "<slug>" would be read as an HTML tag.
        return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")

    return "\n".join("| " + " | ".join(map(cell, row)) + " |" for row in [headers, align, *lines])


def _group_cells(group: dict, mark: str) -> tuple[list[str], list[list[str]]]:
    """The headers and one line of cells per row; ``mark`` follows the baseline's label."""
    baseline, latency = group["baseline"], group["latency_label"]
    headers = ["case", *([f"{latency} p50", "p99"] if latency else [])]
    headers += ["x baseline"] if baseline else []
    headers += [header for header, _ in group["columns"]]
    lines = []
    for row in group["rows"]:
        is_baseline = row["case"] == baseline
        if row.get("error"):
            lines.append([row["label"], "ERROR", *["-"] * (len(headers) - 2)])
            continue
        line = [row["label"] + (mark if is_baseline else "")]
        line += [fmt_us(row["median_us"]), fmt_us(row["p99_us"])] if latency else []
        line += ["1" if is_baseline else _fmt(row["ratio"])] if baseline else []
        line += [_fmt(_lookup(row, path)) for _, path in group["columns"]]
        lines.append(line)
    return headers, lines


def group_table(group: dict) -> str:
    baseline_label = next(
        (row["label"] for row in group["rows"] if row["case"] == group["baseline"]), None
    )
    title = f"{group['title']}  [{group['repeats']} repeat(s); {group['note']}]"
    if baseline_label and group["primary"] != "latency":
        title += f"\n(x baseline: {group['primary']} relative to '{baseline_label}')"
    return title + "\n" + _table(*_group_cells(group, " (baseline)"))


def _target_lines(evaluated: list[dict], *, markdown: bool = False) -> list[list[str]]:
    def measured(entry: dict) -> str:
        if entry["status"] == "SKIP":
            return "not run"
        if entry["measured"] is None and not markdown:
            return entry.get("detail", "-")
        return _fmt(entry["measured"])

    def limit(entry: dict) -> str:
        if entry["report_only"]:
            return "report" if markdown else "-"
        op = _SYMBOLS[entry["op"]] if markdown else entry["op"]
        return f"{op} {_fmt(entry['limit'])}"

    return [[f"{e['section']}. {e['text']}", measured(e), limit(e), e["status"]] for e in evaluated]


def targets_table(evaluated: list[dict]) -> str:
    return "Targets (ratios are medians of per-repeat paired ratios)\n" + _table(
        ["target", "measured", "limit", "status"], _target_lines(evaluated)
    )


def environment_summary(environment: dict) -> str:
    m, v, d = environment["machine"], environment["versions"], environment["durability"]
    return (
        f"Machine: {m['cpu']}, {m['cpus_usable']} CPUs, {m['memory_gib']} GiB, "
        f"load {m['loadavg']} at start, {m['platform']}\n"
        f"Python {v['python']}, Django {v['Django']}, redis-py {v['redis']} "
        f"({v['redis_parser']} parser), psycopg {v['psycopg']} (libpq {v['libpq']}), "
        f"Redis {v['redis_server']}, PostgreSQL {v['postgresql_server']}, "
        f"python-redis-lock {v['python-redis-lock']}, pottery {v['pottery']}, "
        f"gunicorn {v['gunicorn']}\n"
        f"Redis durability: appendonly={d['redis']['appendonly']}, "
        f"appendfsync={d['redis']['appendfsync']}, save='{d['redis']['save']}'; "
        f"PostgreSQL: fsync={d['postgresql']['fsync']}, "
        f"synchronous_commit={d['postgresql']['synchronous_commit']}, "
        f"wal_sync_method={d['postgresql']['wal_sync_method']}"
    )


def write_json(path: Path, document: dict) -> None:
    """Write ``document`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    os.replace(temporary, path)


def markdown(document: dict) -> str:
    """The results of one run as markdown (docs/benchmarks.md): environment, tables, targets."""
    out = [
        f"Run `{document['name']}` of {document['started_at']} ({document['seconds']:.0f} s).",
        "",
    ]
    out.append(environment_summary(document["environment"]).replace("\n", "  \n"))
    for group in document["groups"]:
        out += ["", f"**{group['title']}** ({group['repeats']} repeat(s); {group['note']})", ""]
        out.append(_md_table(*_group_cells(group, " *(baseline)*")))
    headers = ["target", "measured", "limit", "status"]
    out += [
        "",
        "**Targets**",
        "",
        _md_table(headers, _target_lines(document["targets"], markdown=True)),
    ]
    failures = document.get("invariant_failures") or []
    out += ["", "Invariants: " + ("; ".join(failures) if failures else "all held.")]
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # python -m bench.report bench/results/full.json
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m bench.report RESULTS.json (prints it as markdown)")
    print(markdown(json.loads(Path(sys.argv[1]).read_text())), end="")
