"""The README's chart (``docs/bench.svg``), written as plain SVG: no plotting dependency.

One panel per story (the lock cycle, a loser's wait, what the fence adds to a write,
contention); our rows blue, the alternatives grey, a dashed line at the baseline or target.
"""

import math
from html import escape
from pathlib import Path

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


def _ratio(r: dict) -> float:
    return 1.0 if r["ratio"] is None else r["ratio"]


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
    ("fenced-vendor", "One vendor assignment (x the plain insert)",
     lambda r: (_ratio(r), f"{_ratio(r):.2f}x ({r['median_us'] / 1000:.1f} ms)"), False, 1.0, ""),
    ("fenced-charges", "Monthly charges for 5,000 units (x plain bulk_create)",
     lambda r: (_ratio(r), f"{_ratio(r):.2f}x ({r['median_us'] / 1000:.1f} ms)"), False, 1.0, ""),
    ("contention", "Fenced commits per second under contention (x one client alone)",
     lambda r: (_ratio(r), f"{_ratio(r):.2f}x ({r['metrics'].get('ops_per_s', 0):.0f}/s)"),
     False, 0.8, "0.8x: the target on one resource"),
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
        y += 10
        panel_top = y
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
    height = y + 10
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="Benchmark results">'
        f'<style>{STYLE}</style><rect width="{WIDTH}" height="{height}" fill="#ffffff"/>'
        + "".join(parts)
        + f'<text x="10" y="{height - 8}" class="note">{escape(caption)}</text></svg>\n'
    )
    return True
