"""The README's chart (``docs/bench.svg``), written as plain SVG: no plotting dependency.

One panel per story: the lock cycle against the other libraries, what a loser waits for
during the holder's external call, what the fence adds to a write, and throughput under
contention. Our rows are blue, the alternatives grey; a dashed line marks the baseline or
the target.
"""

import math
from dataclasses import dataclass
from html import escape
from pathlib import Path

WIDTH = 800
LABEL_WIDTH = 320
BAR_WIDTH = 280
ROW_HEIGHT = 22
OURS = "#2b6cb0"
OTHER = "#a0aec0"
MISS = "#c05621"


@dataclass
class Panel:
    title: str
    bars: list[tuple[str, float, bool, str]]  # label, value, ours, text
    log: bool = False
    marker: float | None = None
    marker_label: str = ""


def _is_ours(row: dict) -> bool:
    return row["label"].startswith("ours") or row["case"].endswith((".ours", ".service"))


def _ratio(row: dict) -> float:
    return 1.0 if row["ratio"] is None else row["ratio"]


def _lock_bar(r: dict):
    text = f"{r['median_us']:.0f} µs (p99 {r['p99_us'] / 1000:.1f} ms)"
    return r["label"], r["median_us"], _is_ours(r), text


def _loser_bar(r: dict):
    m = r["metrics"]
    text = (
        f"{r['median_us'] / 1000:.3g} ms; {m.get('loser_round_trips', 0)} DB trips; "
        f"{m.get('idle_in_transaction', 0)} idle in txn"
    )
    return r["label"], r["median_us"] / 1000, _is_ours(r), text


def _write_bar(r: dict):
    text = f"{_ratio(r):.2f}x ({r['median_us'] / 1000:.1f} ms)"
    return r["label"], _ratio(r), _is_ours(r), text


def _contention_bar(r: dict):
    text = f"{_ratio(r):.2f}x ({r['metrics'].get('ops_per_s', 0):.0f}/s)"
    return r["label"], _ratio(r), "naive" not in r["case"], text


# group id, panel title, one bar of a row, panel options
_PANELS = [
    ("lock-cycle", "Lock cycle, acquire + release, one client (median µs)", _lock_bar, {}),
    (
        "alternatives",
        "Loser's answer while the holder makes a 200 ms call (median ms, log scale)",
        _loser_bar,
        {"log": True},
    ),
    ("fenced-vendor", "One vendor assignment (x the plain insert)", _write_bar, {"marker": 1.0}),
    (
        "fenced-charges",
        "Monthly charges for 5,000 units (x plain bulk_create)",
        _write_bar,
        {"marker": 1.0},
    ),
    (
        "contention",
        "Fenced commits per second under contention (x one client alone)",
        _contention_bar,
        {"marker": 0.8, "marker_label": "0.8x: the target on one resource"},
    ),
]


def panels(groups: list[dict]) -> list[Panel]:
    by_id = {group["id"]: group for group in groups}
    found = []
    for group_id, title, bar, options in _PANELS:
        rows = [row for row in by_id.get(group_id, {"rows": []})["rows"] if not row.get("error")]
        if rows:
            found.append(Panel(title, [bar(row) for row in rows], **options))
    return found


def _x(value: float, top: float, log: bool) -> float:
    if log:
        low = 0.1
        return (
            BAR_WIDTH
            * (math.log10(max(value, low)) - math.log10(low))
            / (math.log10(top) - math.log10(low))
        )
    return BAR_WIDTH * value / top


def render(found: list[Panel], *, caption: str) -> str:
    parts = []
    y = 30
    for panel in found:
        values = [value for _, value, _, _ in panel.bars] + [panel.marker or 0]
        top = max(values) * 1.05 or 1
        if panel.log:
            top = 10 ** math.ceil(math.log10(max(values)))
        parts.append(f'<text x="10" y="{y}" class="title">{escape(panel.title)}</text>')
        y += 10
        panel_top = y
        for label, value, ours, text in panel.bars:
            x0 = LABEL_WIDTH
            width = max(_x(value, top, panel.log), 1)
            parts.append(
                f'<text x="{LABEL_WIDTH - 8}" y="{y + 15}" class="label">{escape(label)}</text>'
                f'<rect x="{x0}" y="{y + 4}" width="{width:.1f}" height="{ROW_HEIGHT - 8}" '
                f'fill="{OURS if ours else OTHER}"/>'
            )
            parts.append(
                f'<text x="{x0 + width + 6:.1f}" y="{y + 15}" class="value">{escape(text)}</text>'
            )
            y += ROW_HEIGHT
        if panel.marker is not None:
            mx = LABEL_WIDTH + _x(panel.marker, top, panel.log)
            parts.append(
                f'<line x1="{mx:.1f}" y1="{panel_top}" x2="{mx:.1f}" y2="{y}" class="marker"/>'
                f'<text x="{mx + 3:.1f}" y="{y + 11}" class="note">'
                f"{escape(panel.marker_label)}</text>"
            )
            y += 12
        y += 28
    height = y + 10
    style = (
        "text{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;fill:#1a202c}"
        ".title{font-size:14px;font-weight:600}.label{font-size:12px;text-anchor:end}"
        ".value{font-size:11px;fill:#4a5568}.note{font-size:10px;fill:#718096}"
        f".marker{{stroke:{MISS};stroke-width:1;"
        "stroke-dasharray:4 3}"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="Benchmark results">'
        f"<style>{style}</style>"
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>'
        + "".join(parts)
        + f'<text x="10" y="{height - 8}" class="note">{escape(caption)}</text></svg>\n'
    )


def write_chart(path: Path, groups: list[dict], *, caption: str) -> bool:
    found = panels(groups)
    if not found:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(found, caption=caption))
    return True
