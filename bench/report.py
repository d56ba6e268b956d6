"""Targets, the printed table and the JSON file.

A target is PASS or MISS (a measured speed); a broken invariant is FAIL (a wrong result),
and so is a case that crashed. ``python -m bench`` exits non-zero only on FAIL: a missed
speed target is a finding to explain, not a broken build.
"""

import json
import math
import os
from pathlib import Path
from statistics import median

from bench.plan import Target


def _lookup(row: dict, path: str):
    node = row
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _compare(value: float, op: str, limit: float) -> bool:
    if op == "<=":
        return value <= limit
    if op == ">=":
        return value >= limit
    return math.isclose(value, limit)


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
        row = rows.get((target.group, target.case))
        other = rows.get((target.group, target.versus)) if target.versus else None
        if row is None or (target.versus and other is None):
            evaluated.append(entry)
            continue
        if row.get("error") or (other and other.get("error")):
            entry["status"] = "FAIL"
            entry["detail"] = row.get("error") or other.get("error")
            evaluated.append(entry)
            continue
        if target.versus:
            paired = [
                mine / theirs
                for mine, theirs in zip(
                    row["per_repeat_value"], other["per_repeat_value"], strict=False
                )
                if mine is not None and theirs
            ]
            measured = median(paired) if paired else None
        else:
            measured = _lookup(row, target.value)
        if measured is None:
            entry["status"] = "MISS"
            entry["detail"] = "not measured"
        else:
            entry["measured"] = round(float(measured), 3)
            if target.report_only:
                entry["status"] = "INFO"
            else:
                entry["status"] = (
                    "PASS" if _compare(float(measured), target.op, target.limit) else "MISS"
                )
        evaluated.append(entry)
    return evaluated


def invariant_failures(groups: list[dict]) -> list[str]:
    failures = []
    for group in groups:
        for row in group["rows"]:
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
    if value >= 100_000:
        return f"{value / 1000:.0f} ms"
    if value >= 10_000:
        return f"{value / 1000:.1f} ms"
    if value >= 1000:
        return f"{value / 1000:.2f} ms"
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
    out = [
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    ]
    out.append("  ".join("-" * w for w in widths))
    for line in lines:
        out.append(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths, strict=True))
            )
        )
    return "\n".join(out)


def group_table(group: dict) -> str:
    baseline_label = next(
        (row["label"] for row in group["rows"] if row["case"] == group["baseline"]), None
    )
    headers = ["case"]
    show_latency = bool(group["latency_label"])
    if show_latency:
        headers += [f"{group['latency_label']} p50", "p99"]
    if group["baseline"]:
        headers.append("x baseline")
    headers += [header for header, _ in group["columns"]]
    lines = []
    for row in group["rows"]:
        if row.get("error"):
            lines.append([row["label"], *["ERROR"] + ["-"] * (len(headers) - 2)])
            continue
        line = [row["label"] + (" (baseline)" if row["case"] == group["baseline"] else "")]
        if show_latency:
            line += [fmt_us(row["median_us"]), fmt_us(row["p99_us"])]
        if group["baseline"]:
            line.append("1" if row["case"] == group["baseline"] else _fmt(row["ratio"]))
        line += [_fmt(_lookup(row, path)) for _, path in group["columns"]]
        lines.append(line)
    title = f"{group['title']}  [{group['repeats']} repeat(s); {group['note']}]"
    if baseline_label and group["primary"] != "latency":
        title += f"\n(x baseline: {group['primary']} relative to '{baseline_label}')"
    return title + "\n" + _table(headers, lines)


def targets_table(evaluated: list[dict]) -> str:
    lines = []
    for entry in evaluated:
        if entry["status"] == "SKIP":
            measured = "not run"
        elif entry["measured"] is None:
            measured = entry.get("detail", "-")
        else:
            measured = _fmt(entry["measured"])
        limit = "-" if entry["report_only"] else f"{entry['op']} {_fmt(entry['limit'])}"
        lines.append([entry["section"] + ". " + entry["text"], measured, limit, entry["status"]])
    return "Targets (ratios are medians of per-repeat paired ratios)\n" + _table(
        ["target", "measured", "limit", "status"], lines
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


# -- markdown (for docs/benchmarks.md and the README) -------------------------------------


def _md_table(headers: list[str], lines: list[list[str]]) -> str:
    align = ["---"] + ["---:"] * (len(headers) - 1)
    rows = [headers, align, *lines]

    def cell(text: str) -> str:
        # A "|" ends a cell; "<slug>" would be read as an HTML tag.
        return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")

    return "\n".join("| " + " | ".join(cell(text) for text in row) + " |" for row in rows)


def markdown(document: dict) -> str:
    """The results of one run as markdown: environment, one table per group, targets."""
    out = [
        f"Run `{document['name']}` of {document['started_at']} ({document['seconds']:.0f} s).",
        "",
    ]
    out.append(environment_summary(document["environment"]).replace("\n", "  \n"))
    for group in document["groups"]:
        headers = ["case"]
        if group["latency_label"]:
            headers += [f"{group['latency_label']} p50", "p99"]
        if group["baseline"]:
            headers.append("x baseline")
        headers += [header for header, _ in group["columns"]]
        lines = []
        for row in group["rows"]:
            label = row["label"] + (" *(baseline)*" if row["case"] == group["baseline"] else "")
            if row.get("error"):
                lines.append([label, *["error"] * (len(headers) - 1)])
                continue
            line = [label]
            if group["latency_label"]:
                line += [fmt_us(row["median_us"]), fmt_us(row["p99_us"])]
            if group["baseline"]:
                line.append("1" if row["case"] == group["baseline"] else _fmt(row["ratio"]))
            line += [_fmt(_lookup(row, path)) for _, path in group["columns"]]
            lines.append(line)
        out += ["", f"**{group['title']}** ({group['repeats']} repeat(s); {group['note']})", ""]
        out.append(_md_table(headers, lines))
    lines = []
    for entry in document["targets"]:
        measured = "not run" if entry["status"] == "SKIP" else _fmt(entry["measured"])
        symbol = {"<=": "≤", ">=": "≥", "==": "="}[entry["op"]]
        limit = "report" if entry["report_only"] else f"{symbol} {_fmt(entry['limit'])}"
        lines.append([f"{entry['section']}. {entry['text']}", measured, limit, entry["status"]])
    out += ["", "**Targets**", "", _md_table(["target", "measured", "limit", "status"], lines)]
    failures = document.get("invariant_failures") or []
    out += ["", "Invariants: " + ("; ".join(failures) if failures else "all held.")]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.report", description="Print a results file as markdown."
    )
    parser.add_argument("results", type=Path, help="e.g. bench/results/full.json")
    path = parser.parse_args().results
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        parser.exit(1, f"cannot read {path}: {exc}\n")
    print(markdown(document), end="")
