"""Targets, the printed tables, the JSON file and the README's chart. A target is PASS or MISS
(a speed); a broken invariant or a crashed case is FAIL, the only thing that fails the run."""

import json
import math
import operator
import os
import sys
from functools import partial
from html import escape
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


def judged(section: str, text: str, measured, op: str, limit: float, *, report_only=False,
           error: str | None = None, status: str | None = None, **more) -> dict:  # fmt: skip
    """A goal's entry: FAIL (``error``: a crashed case), the ``status`` given, INFO
    (``report_only``), or PASS / MISS (``measured`` against ``limit``; MISS if not measured)."""
    shown = round(measured, 3) if isinstance(measured, float) else measured
    entry = {"section": section, "text": text, "op": op, "limit": limit, **more}
    entry.update(measured=None if error else shown, report_only=report_only)
    if error:
        entry["detail"], status = error, "FAIL"
    elif status is None:
        met = not report_only and measured is not None and _OPS[op](float(measured), limit)
        status = "INFO" if report_only else "PASS" if met else "MISS"
    if status == "MISS" and entry["measured"] is None:
        entry.setdefault("detail", "not measured")
    return {**entry, "status": status}


def evaluate(targets: list[Target], groups: list[dict]) -> list[dict]:
    """Measure each target against the groups' rows; SKIP where its group did not run."""
    rows = {(g["id"], row["case"]): row for g in groups for row in g["rows"]}
    evaluated = []
    for target in targets:
        facts = [getattr(target, key) for key in ("section", "text")]
        given = {"op": target.op, "limit": target.limit, "report_only": target.report_only}
        row = rows.get((target.group, target.case))
        other = rows.get((target.group, target.versus)) if target.versus else None
        if row is None or (target.versus and other is None):
            evaluated.append(judged(*facts, None, status="SKIP", **given))
            continue
        error = row.get("error") or (other or {}).get("error")
        measured = None if error else _measure(target, row, other)
        status = "MISS" if measured is None else None  # a report-only target too, not INFO
        measured = None if measured is None else float(measured)
        evaluated.append(judged(*facts, measured, error=error, status=status, **given))
    return evaluated


def invariant_failures(groups: list[dict]) -> list[str]:
    failures = []
    for row in (row for group in groups for row in group["rows"]):
        if row.get("error"):
            failures.append(f"{row['case']}: crashed: {row['error'].splitlines()[0]}")
        broken = (check for check in row["invariants"] if not check["ok"])
        failures += [f"{row['case']}: {check['name']}: {check['detail']}" for check in broken]
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


def _table(headers: list[str], lines: list[list[str]], *, markdown: bool = False) -> str:
    if markdown:
        rows = ["| " + " | ".join(cells) + " |" for cells in (headers, *lines)]
        return "\n".join([rows[0], "|" + "---|" * len(headers), *rows[1:]])
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


def targets_table(entries: list[dict]) -> str:
    def measured(entry: dict) -> str:
        if entry["status"] == "SKIP":
            return "not run"
        return entry.get("detail", "-") if entry["measured"] is None else _fmt(entry["measured"])

    def limit(entry: dict) -> str:
        return "-" if entry["report_only"] else f"{entry['op']} {_fmt(entry['limit'])}"

    lines = [[f"{e['section']}. {e['text']}", measured(e), limit(e), e["status"]] for e in entries]
    table = _table(["target", "measured", "limit", "status"], lines)
    return f"Targets (ratios are medians of per-repeat paired ratios)\n{table}"


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
    m, v, durability = environment["machine"], environment["versions"], environment["durability"]
    return _SUMMARY.format(m=m, v=v, r=durability["redis"], p=durability["postgresql"])


def write_json(path: Path, document: dict) -> None:
    """Write ``document`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    os.replace(temporary, path)


def invariants_text(document: dict, held: str) -> str:
    """The invariants' verdict: every failure, or how many checks held (``held`` says what)."""
    if failures := document["invariant_failures"]:
        return "\n".join(["Invariants: FAIL", *(f"  FAIL {failure}" for failure in failures)])
    checks = sum(len(row["invariants"]) for g in document["groups"] for row in g["rows"])
    return f"Invariants: all {checks} checks held ({held})"


def text(document: dict) -> str:
    tables = [group_table(group) for group in document["groups"]]
    summary = environment_summary(document["environment"])
    held = invariants_text(document, "no overlap, tokens increasing, exactly once")
    return "\n\n".join([summary, *tables, targets_table(document["targets"]), held])


def svg(width: int, height: int, label: str, style: str, parts: list[str], caption: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{label}">'
        f'<style>{style}</style><rect width="{width}" height="{height}" fill="#ffffff"/>'
        + "".join(parts)
        + f'<text x="10" y="{height - 8}" class="note">{escape(caption)}</text></svg>\n'
    )


# -- The README's chart (docs/bench.svg), plain SVG: one panel per story (lock cycle, loser's
# wait, fenced writes, contention); ours blue, the others grey, a dashed line at the target.
WIDTH, LABEL_WIDTH, BAR_WIDTH, ROW_HEIGHT = 800, 320, 280, 22
OURS, OTHER, MISS = "#2b6cb0", "#a0aec0", "#c05621"
STYLE = (
    "text{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;fill:#1a202c}"
    ".title{font-size:14px;font-weight:600}.label{font-size:12px;text-anchor:end}"
    ".value{font-size:11px;fill:#4a5568}.note{font-size:10px;fill:#718096}"
    f".marker{{stroke:{MISS};stroke-width:1;stroke-dasharray:4 3}}"
)


def _is_ours(row: dict) -> bool:
    if row["case"].startswith("contention."):
        return "naive" not in row["case"]  # every contention row is ours but the naive one
    return row["label"].startswith("ours") or row["case"].endswith((".ours", ".service"))


def _times_baseline(r: dict, *, per_s: bool = False) -> tuple[float, str]:
    ratio = 1.0 if r["ratio"] is None else r["ratio"]
    shown = f"{r['metrics']['ops_per_s']:.0f}/s" if per_s else f"{r['median_us'] / 1000:.1f} ms"
    return ratio, f"{ratio:.2f}x ({shown})"


# Each panel: group id, title, a row's (value, text), log scale, marker, marker label.
# fmt: off
_PANELS = [
    ("lock-cycle", "Lock cycle, acquire + release, one client (median µs)",
     lambda r: (r["median_us"], f"{r['median_us']:.0f} µs (p99 {r['p99_us'] / 1000:.1f} ms)"),
     False, None, ""),
    ("alternatives", "Loser's answer while the holder makes a 200 ms call (median ms, log scale)",
     lambda r: (r["median_us"] / 1000, f"{r['median_us'] / 1000:.3g} ms; "
                f"{r['metrics'].get('loser_round_trips', 0)} DB trips; "
                f"{r['metrics'].get('idle_in_transaction', 0)} idle in txn"),
     True, None, ""),
    ("fenced-vendor", "One vendor assignment (x the plain insert)", _times_baseline, False,
     1.0, ""),
    ("fenced-charges", "Monthly charges for 5,000 units (x plain bulk_create)", _times_baseline,
     False, 1.0, ""),
    ("contention", "Fenced commits per second under contention (x one client alone)",
     partial(_times_baseline, per_s=True), False, 0.8, "0.8x: the target on one resource"),
]
# fmt: on


def write_chart(path: Path, groups: list[dict], *, caption: str) -> bool:
    """Write the chart of the groups that ran; False if none of the charted ones did."""
    rows_of = {group["id"]: [r for r in group["rows"] if not r.get("error")] for group in groups}
    parts, y = [], 30
    for group_id, title, bar, log, marker, marker_label in _PANELS:
        if not (rows := rows_of.get(group_id)):
            continue
        bars = [(row["label"], *bar(row), _is_ours(row)) for row in rows]
        values = [value for _, value, _, _ in bars] + [marker or 0]
        top = 10 ** math.ceil(math.log10(max(values))) if log else max(values) * 1.05 or 1

        def x(value: float, top=top, log=log) -> float:
            if log:  # from 0.1 up
                return BAR_WIDTH * math.log10(max(value, 0.1) / 0.1) / math.log10(top / 0.1)
            return BAR_WIDTH * value / top

        parts.append(f'<text x="10" y="{y}" class="title">{escape(title)}</text>')
        y = panel_top = y + 10
        for label, value, text, ours in bars:
            width = max(x(value), 1)
            parts.append(
                f'<text x="{LABEL_WIDTH - 8}" y="{y + 15}" class="label">{escape(label)}</text>'
                f'<rect x="{LABEL_WIDTH}" y="{y + 4}" width="{width:.1f}" '
                f'height="{ROW_HEIGHT - 8}" fill="{OURS if ours else OTHER}"/>'
                f'<text x="{LABEL_WIDTH + width + 6:.1f}" y="{y + 15}" class="value">'
                f"{escape(text)}</text>"
            )
            y += ROW_HEIGHT
        if marker is not None:
            mx = LABEL_WIDTH + x(marker)
            parts.append(
                f'<line x1="{mx:.1f}" y1="{panel_top}" x2="{mx:.1f}" y2="{y}" class="marker"/>'
                f'<text x="{mx + 3:.1f}" y="{y + 11}" class="note">{escape(marker_label)}</text>'
            )
            y += 12
        y += 28
    if not parts:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg(WIDTH, y + 10, "Benchmark results", STYLE, parts, caption))
    return True


if __name__ == "__main__":  # python -m bench.report bench/results/full.json: for the docs
    if len(sys.argv) != 2:
        sys.exit("usage: python -m bench.report RESULTS.json (prints it for docs/benchmarks.md)")
    run = json.loads(Path(sys.argv[1]).read_text())
    print(f"Run `{run['name']}` of {run['started_at']} ({run['seconds']:.0f} s):\n")
    print(f"```text\n{text(run)}\n```")
