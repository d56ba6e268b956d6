"""What ``make bench-scale`` reports: the estimate, the table per scale, the goals (PASS /
MISS), where the time went when one missed, and the chart (plain SVG, as docs/bench.svg)."""

import math
import re
import textwrap
from html import escape
from pathlib import Path
from statistics import median

from bench import diagnose, report

DOCS_TABLE = re.compile(r"(<!-- bench-scale:start -->\n).*?(<!-- bench-scale:end -->)", re.S)
GB = 1e9
_NO_PLAN = ("(no plan: a COPY, or a statement that a trigger or a foreign-key check runs, which "
            "Django does not send)")  # fmt: skip


def estimate_text(scales: list[int], repeats: int, expected: dict, source: str, free) -> str:
    shown = ", ".join(f"{n:,}" for n in scales)
    room = "" if free is None else f"; {free / GB:.0f} GB free there"
    return (f"bench-scale: {shown} associations x 200 units, {repeats} paired run(s) each: "
            f"about {expected['seconds'] / 60:.0f} min and {expected['peak_bytes'] / GB:.1f} GB "
            f"of PostgreSQL disk at the peak ({source}){room}")  # fmt: skip


# -- the figures --------------------------------------------------------------------------------
def _per_repeat(row: dict, name: str) -> list[float]:
    return [v for v in row["metrics_per_repeat"].get(name, []) if isinstance(v, int | float)]


def _scale_row(group: dict) -> dict:
    n, rows = group["associations"], {row["case"]: row for row in group["rows"]}
    ours, loop = rows["scale.ours"], rows["scale.baseline"]
    entry = {"associations": n, "error": ours.get("error") or loop.get("error")}
    for key, row in (("ours", ours), ("loop", loop)):
        seconds, rss = _per_repeat(row, "seconds"), _per_repeat(row, "peak_rss_mb")
        charges = _per_repeat(row, "charges_per_s")
        entry.update({
            f"{key}_seconds": round(median(seconds), 2) if seconds else None,
            f"{key}_seconds_range": [min(seconds), max(seconds)] if seconds else None,
            f"{key}_ms_per_association": round(1000 * median(seconds) / n, 3) if seconds else None,
            f"{key}_peak_rss_mb": round(median(rss), 1) if rss else None,
            f"{key}_charges_per_s": round(median(charges)) if charges else None,
        })  # fmt: skip
    pairs = zip(ours["per_repeat_value"], loop["per_repeat_value"], strict=False)
    disk, runs = group.get("peak_disk_bytes"), len(group["rows"]) * group["repeats"]
    return {**entry, "ratio": ours["ratio"],
            "ratios": [round(a / b, 3) for a, b in pairs if a and b],
            "peak_disk_gb": round(disk / GB, 2) if disk else None,
            "case_seconds": round(group["seconds"] / runs, 1)}  # fmt: skip


def _target(text: str, measured, op: str, limit: float, error=None) -> dict:
    return report.judged("scale", text, measured, op, limit, error=error and error.splitlines()[0])


def _ratio(a, b):
    return a / b if a is not None and b else None


def targets(rows: list[dict], goals: dict) -> list[dict]:
    found = [
        _target(f"ours ≤ {goals['ratio']}x the plain COPY loop at {row['associations']:,}",
                row["ratio"], "<=", goals["ratio"], row["error"])
        for row in rows
    ]  # fmt: skip
    if len(rows) < 2:
        return found
    smallest, before, largest = rows[0], rows[-2], rows[-1]
    error = largest["error"] or before["error"] or smallest["error"]
    cost = _ratio(largest["ours_ms_per_association"], before["ours_ms_per_association"])
    rss = _ratio(largest["ours_peak_rss_mb"], smallest["ours_peak_rss_mb"])
    return [
        *found,
        _target(f"ours per association at {largest['associations']:,} ≤ "
                f"{goals['cost_growth']}x that at {before['associations']:,}",
                cost, "<=", goals["cost_growth"], error),
        _target(f"ours' peak RSS at {largest['associations']:,} ≤ {goals['rss_growth']}x "
                f"that at {smallest['associations']:,}", rss, "<=", goals["rss_growth"], error),
    ]  # fmt: skip


def _statements(group: dict, case: str) -> tuple[dict, dict]:
    """A case's statements per association (all its runs) and its first run's plans."""
    [row] = (row for row in group["rows"] if row["case"] == case)
    snapshots = [s for s in row["metrics_per_repeat"].get("statements", []) if s]
    plans = next((p for p in row["metrics_per_repeat"].get("plans", []) if p), {})
    return diagnose.per_association(snapshots, group["associations"]), plans


def where_the_time_goes(groups: list[dict], rows: list[dict], judged: list[dict], goals: dict):
    """For a MISS: the statements grown from the smallest scale, and the top ones where missed."""
    if not any(t["status"] == "MISS" for t in judged) or not groups:
        return None
    found: dict = {"grown": {}, "at_scale": {}}
    first, last = groups[0], groups[-1]
    for case in ("scale.ours", "scale.baseline"):
        small, small_plans = _statements(first, case)
        large, large_plans = _statements(last, case)
        grown = diagnose.grown(small, large, factor=1.1, share=0.01) if len(groups) > 1 else []
        for entry in grown:
            key = diagnose.normalized(entry["query"])
            entry.update(plan_before=small_plans.get(key), plan_after=large_plans.get(key))
        found["grown"][case] = grown
    for group, row in zip(groups, rows, strict=True):
        if row["ratio"] is None or row["ratio"] <= goals["ratio"]:
            continue
        top = {}
        for case in ("scale.ours", "scale.baseline"):
            statements, _ = _statements(group, case)
            ordered = sorted(statements.values(), key=lambda e: -e["ms_per_association"])
            top[case] = ordered[:10]
        found["at_scale"][str(group["associations"])] = top
    return found


def analyse(groups: list[dict], goals: dict) -> dict:
    rows = [_scale_row(group) for group in groups]
    judged = targets(rows, goals)
    return {"rows": rows, "targets": judged,
            "where": where_the_time_goes(groups, rows, judged, goals)}  # fmt: skip


# -- text ---------------------------------------------------------------------------------------
_HEADERS = [
    "associations", "loop s", "ours s", "ours/loop", "loop ms/assoc", "ours ms/assoc",
    "ours charges/s", "loop peak MB", "ours peak MB", "disk GB",
]  # fmt: skip


def _cells(row: dict) -> list[str]:
    def fmt(value, spec=""):
        return "-" if value is None else format(value, spec)

    ratios = ", ".join(f"{r:.2f}" for r in row["ratios"])
    return [
        f"{row['associations']:,}",
        fmt(row["loop_seconds"], ".1f"), fmt(row["ours_seconds"], ".1f"),
        f"{fmt(row['ratio'], '.2f')} ({ratios})" if row["ratios"] else fmt(row["ratio"]),
        fmt(row["loop_ms_per_association"], ".2f"), fmt(row["ours_ms_per_association"], ".2f"),
        fmt(row["ours_charges_per_s"], ","), fmt(row["loop_peak_rss_mb"], ".1f"),
        fmt(row["ours_peak_rss_mb"], ".1f"), fmt(row["peak_disk_gb"], ".2f"),
    ]  # fmt: skip


def table(rows: list[dict], *, markdown: bool = False) -> str:
    return report._table(_HEADERS, [_cells(row) for row in rows], markdown=markdown)


def _where_text(where: dict | None, *, plans: bool) -> str:
    if not where:
        return ""
    lines = ["Where the time goes (a goal missed):"]
    for case, grown in where["grown"].items():
        name = "ours" if case.endswith("ours") else "the loop"
        if not grown:
            lines.append(f"  {name}: no statement's time per association grew by more than 10%")
        for entry in grown:
            before = f"{entry['ms_before']:.3f} ms ({entry['calls_before']:g} calls)"
            after = f"{entry['ms_after']:.3f} ms ({entry['calls_after']:g} calls)"
            query = _one_line(entry["query"], 160)
            lines.append(f"  {name}: {before} -> {after} per association: {query}")
            for label in ("plan_before", "plan_after") if plans else ():
                plan = textwrap.indent(entry[label] or _NO_PLAN, " " * 6)
                lines.append(f"    {label.replace('_', ' ')}:\n{plan}")
    for scale, top in where["at_scale"].items():
        lines.append(f"  at {int(scale):,}, the statements that take longest per association:")
        for case, entries in top.items():
            lines += [f"    {case.split('.')[1]:8} {e['ms_per_association']:.3f} ms "
                      f"({e['calls_per_association']:g} calls): {_one_line(e['query'], 140)}"
                      for e in entries]  # fmt: skip
    return "\n".join(lines)


def _one_line(query: str, width: int) -> str:
    return " ".join(query.split())[:width]


def text(document: dict) -> str:
    head = f"Month start at scale ({document['repeats']} paired run(s) per scale; medians)"
    parts = [
        report.environment_summary(document["environment"]),
        head + "\n" + table(document["rows"]),
        report.targets_table(document["targets"]),
    ]
    if where := _where_text(document["where"], plans=False):
        parts.append(where + "\n  (the plans: the .md and .json files)")
    parts.append(report.invariants_text(document, "every association billed once"))
    return "\n\n".join(parts)


def markdown(document: dict) -> str:
    where = _where_text(document["where"], plans=True)
    summary = report.environment_summary(document["environment"]).replace("\n", "; ")
    parts = [
        f"# make bench-scale: {document['name']} of {document['started_at']}",
        f"{document['seconds']:.0f} s; estimated {document['estimate']['seconds']} s. {summary}",
        table(document["rows"], markdown=True),
        "```text\n" + report.targets_table(document["targets"]) + "\n```",
        *(["```text\n" + where + "\n```"] if where else []),
    ]
    return "\n\n".join(parts) + "\n"


# -- the chart ----------------------------------------------------------------------------------
WIDTH, PANEL_HEIGHT, LEFT, RIGHT = 800, 270, 70, 110
STYLE = report.STYLE + ".axis{stroke:#a0aec0;stroke-width:1}.grid{stroke:#edf2f7;stroke-width:1}"
_PANELS = (
    ("Month start: cost per association (ms of wall time)", "ms_per_association", "{:.2f}"),
    ("Peak memory, largest process (MB)", "peak_rss_mb", "{:.0f}"),
)


def chart(rows: list[dict], *, caption: str) -> str:
    """Two panels against the scale (log): cost per association, peak RSS; ours and the loop."""
    scales = [row["associations"] for row in rows]
    low, high = math.log10(min(scales)), math.log10(max(scales))
    span = (high - low) or 1

    def x(n: int) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * (math.log10(n) - low) / span

    parts, top = [], 20
    for title, field, fmt in _PANELS:
        values = [row[f"{who}_{field}"] for row in rows for who in ("ours", "loop")]
        ceiling = max([v for v in values if v is not None] or [1]) * 1.2
        bottom = top + PANEL_HEIGHT - 40

        def y(value: float, top=top, bottom=bottom, ceiling=ceiling) -> float:
            return bottom - (bottom - top - 20) * value / ceiling

        parts.append(f'<text x="10" y="{top + 4}" class="title">{escape(title)}</text>')
        parts.append(
            f'<line x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" class="axis"/>'
        )
        for n in scales:
            parts.append(
                f'<text x="{x(n):.1f}" y="{bottom + 16}" class="value" text-anchor="middle">'
                f"{n:,}</text>"
            )
        for who, colour in (("loop", report.OTHER), ("ours", report.OURS)):
            points = [(x(r["associations"]), y(r[f"{who}_{field}"]), r[f"{who}_{field}"])
                      for r in rows if r[f"{who}_{field}"] is not None]  # fmt: skip
            if len(points) > 1:
                path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in points)
                parts.append(
                    f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
                )
            for px, py, value in points:
                label = fmt.format(value)
                parts.append(
                    f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{colour}"/>'
                    f'<text x="{px + 6:.1f}" y="{py - 6:.1f}" class="value">{label}</text>'
                )
        legend = bottom + 32
        for offset, colour, label in (
            (0, report.OURS, "ours: --all-orgs --workers 2"),
            (220, report.OTHER, "plain 2-process COPY loop"),
        ):
            parts.append(
                f'<rect x="{LEFT + offset}" y="{legend - 9}" width="12" height="4" '
                f'fill="{colour}"/><text x="{LEFT + offset + 18}" y="{legend - 4}" '
                f'class="note">{label}</text>'
            )
        top += PANEL_HEIGHT
    return report.svg(WIDTH, top + 10, "Month start at scale", STYLE, parts, caption)


def write(document: dict, results: Path, *, docs: Path | None) -> list[Path]:
    """The JSON, the ``.md`` table and ``.svg`` chart; with ``docs``, chart and table there too."""
    name = document["name"]
    written = [results / f"{name}.json", results / f"{name}.md", results / f"{name}.svg"]
    report.write_json(written[0], document)
    written[1].write_text(markdown(document))
    machine = document["environment"]["machine"]
    svg = chart(document["rows"], caption=f"make bench-scale, {document['started_at'][:10]}: "
                f"{machine['cpus_usable']} CPUs ({machine['cpu']}), shared; medians of "
                f"{document['repeats']} paired run(s).")  # fmt: skip
    written[2].write_text(svg)
    if docs is not None:
        (docs / "bench-scale.svg").write_text(svg)
        written.append(docs / "bench-scale.svg")
        page = docs / "benchmarks.md"
        rows, now = table(document["rows"], markdown=True), page.read_text()
        if DOCS_TABLE.search(now):
            page.write_text(DOCS_TABLE.sub(lambda m: f"{m[1]}{rows}\n{m[2]}", now))
            written.append(page)
    return written
