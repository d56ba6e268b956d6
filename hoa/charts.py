"""Small server-side SVG charts for the staff pages: no JavaScript, no CDN, no library.

Two pictures are enough here: a bar chart (monthly totals, attempts per outcome) and the
lock timeline of one resource (its grants and rejections over time, coloured by outcome).
Both return markup built with ``format_html``, so every label is escaped; colours come
from CSS classes (``site.css``), so the charts follow the site's palette.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timezone import localtime
from django.utils.translation import gettext as _


@dataclass(frozen=True)
class Bar:
    label: str
    value: Decimal | int | float
    # Shown on hover; defaults to "<label>: <value>".
    title: str = ""
    # Extra CSS class, e.g. an outcome name, to colour one bar differently.
    css_class: str = ""


def _number(value: float) -> str:
    """Format an SVG coordinate: short, locale-independent."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def bar_chart(
    bars: Sequence[Bar],
    *,
    title: str,
    width: int = 640,
    height: int = 200,
    value_format=str,
) -> SafeString:
    """Render ``bars`` as an SVG bar chart, one ``<rect class="bar">`` per bar.

    A second drawing of the same bars follows it, lying down (``narrow_bar_chart``): the
    one a phone shows (site.css swaps them at 640 px). Scaled down to a phone's width, the
    upright chart's labels would be 4 px high; the lying one is drawn at about a phone's
    width, so its labels keep their size.
    """
    if not bars:
        return format_html('<p class="empty">{}</p>', _("Nothing to chart yet."))
    top, bottom, side = 22, 24, 8
    plot_height = height - top - bottom
    highest = max((float(bar.value) for bar in bars), default=0.0) or 1.0
    slot = (width - 2 * side) / len(bars)
    bar_width = max(slot * 0.7, 1.0)
    base = top + plot_height
    parts = [
        _upright_bar(
            bar,
            x=side + index * slot + (slot - bar_width) / 2,
            width=bar_width,
            height=plot_height * max(float(bar.value), 0.0) / highest,
            base=base,
            label_y=height - 8,
            value_format=value_format,
        )
        for index, bar in enumerate(bars)
    ]
    return format_html(
        '<svg class="chart bars wide" viewBox="0 0 {w} {h}" role="img" aria-label="{title}" '
        'xmlns="http://www.w3.org/2000/svg"><title>{title}</title>'
        '<line class="axis" x1="{side}" y1="{base}" x2="{right}" y2="{base}"/>{bars}</svg>{narrow}',
        w=width,
        h=height,
        title=title,
        side=side,
        right=width - side,
        base=_number(base),
        bars=format_html_join("", "{}", ((part,) for part in parts)),
        narrow=narrow_bar_chart(bars, title=title, value_format=value_format),
    )


def _upright_bar(
    bar: Bar, *, x: float, width: float, height: float, base: float, label_y: int, value_format
) -> SafeString:
    """One bar of ``bar_chart`` standing on ``base``: its value above it (none for zero),
    its label at ``label_y``, its title for a pointer."""
    y = base - height
    center = x + width / 2
    shown = value_format(bar.value)
    return format_html(
        "<g><title>{title}</title>"
        '<rect class="bar {extra}" x="{x}" y="{y}" width="{w}" height="{h}" rx="2"/>'
        '<text class="value" x="{cx}" y="{vy}" text-anchor="middle">{shown}</text>'
        '<text class="label" x="{cx}" y="{ly}" text-anchor="middle">{label}</text></g>',
        title=bar.title or f"{bar.label}: {shown}",
        extra=bar.css_class,
        x=_number(x),
        y=_number(y),
        w=_number(width),
        h=_number(height),
        cx=_number(center),
        vy=_number(max(y - 5, 12)),
        ly=_number(label_y),
        shown=shown if float(bar.value) else "",
        label=bar.label,
    )


def narrow_bar_chart(bars: Sequence[Bar], *, title: str, value_format=str) -> SafeString:
    """The same bars lying down, one row each (label, bar, value), drawn 340 units wide: at
    a phone's width its text stays at about its own size."""
    width, row, label_width, value_width = 340, 22, 104, 56
    plot_width = width - label_width - value_width
    highest = max((float(bar.value) for bar in bars), default=0.0) or 1.0
    rows = []
    for index, bar in enumerate(bars):
        value = float(bar.value)
        y = index * row
        length = plot_width * max(value, 0.0) / highest
        shown = value_format(bar.value)
        rows.append(
            format_html(
                "<g><title>{title}</title>"
                '<text class="value" x="{vx}" y="{ty}">{shown}</text>'
                '<text class="label" x="{lx}" y="{ty}" text-anchor="end">{label}</text>'
                '<rect class="hbar {extra}" x="{x}" y="{y}" width="{w}" height="{h}" rx="2"/></g>',
                title=bar.title or f"{bar.label}: {shown}",
                lx=label_width - 6,
                ty=_number(y + row * 0.68),
                label=bar.label,
                extra=bar.css_class,
                x=label_width,
                y=_number(y + 4),
                w=_number(length),
                h=row - 8,
                vx=_number(label_width + length + 4),
                shown=shown if value else "",
            )
        )
    return format_html(
        '<svg class="chart bars narrow" viewBox="0 0 {w} {h}" role="img" aria-label="{title}" '
        'xmlns="http://www.w3.org/2000/svg"><title>{title}</title>{rows}</svg>',
        w=width,
        h=row * len(bars),
        title=title,
        rows=format_html_join("", "{}", ((part,) for part in rows)),
    )


@dataclass(frozen=True)
class Mark:
    """One fenced attempt on the timeline."""

    at: datetime
    outcome: str  # a FenceEvent outcome; also the mark's CSS class
    token: int | None
    title: str  # hover text: what happened, who, why


@dataclass(frozen=True)
class LeaseSpan:
    """The lease held right now, drawn as a bar from its grant to its expiry."""

    start: datetime
    end: datetime
    token: int | None
    title: str


def lock_timeline(
    marks: Sequence[Mark],
    *,
    lanes: Sequence[tuple[str, str]],
    lease: LeaseSpan | None = None,
    title: str,
    width: int = 900,
) -> SafeString:
    """Render one resource's attempts as an SVG: x = time, one lane per outcome.

    ``lanes`` is the (outcome, label) order top to bottom; a lane is drawn only when a
    mark uses it. Each mark carries its token as a label (``#7``), so the order in which
    tokens were granted and rejected reads straight off the picture.
    """
    if not marks and lease is None:
        return format_html('<p class="empty">{}</p>', _("No attempts recorded for this resource."))
    used = {mark.outcome for mark in marks}
    rows = [(outcome, label) for outcome, label in lanes if outcome in used]
    if lease is not None:
        rows.insert(0, ("lease", _("Held now")))
    moments = [mark.at for mark in marks]
    if lease is not None:
        moments += [lease.start, lease.end]
    frame = _TimelineFrame.around(moments, lanes=[outcome for outcome, _label in rows], width=width)
    parts = [frame.lane(outcome, label) for outcome, label in rows]
    if lease is not None:
        parts.append(frame.lease_bar(lease))
    parts += [frame.mark(mark) for mark in marks]
    parts.append(frame.time_axis())
    return format_html(
        '<svg class="chart timeline" viewBox="0 0 {w} {h}" role="img" aria-label="{title}" '
        'xmlns="http://www.w3.org/2000/svg"><title>{title}</title>{parts}</svg>',
        w=width,
        h=frame.height,
        title=title,
        parts=format_html_join("", "{}", ((part,) for part in parts)),
    )


@dataclass(frozen=True)
class _TimelineFrame:
    """The timeline's geometry: where a moment falls (x) and where a lane sits (y)."""

    start: datetime
    end: datetime
    lanes: Sequence[str]
    width: int
    label_width: int = 150
    right: int = 24
    top: int = 12
    lane_height: int = 34
    axis_height: int = 26

    @classmethod
    def around(cls, moments: Sequence[datetime], *, lanes: Sequence[str], width: int):
        start, end = min(moments), max(moments)
        if end - start < timedelta(seconds=2):
            # A single moment (or a burst within it): give the picture some width.
            start, end = start - timedelta(seconds=1), end + timedelta(seconds=1)
        return cls(start=start, end=end, lanes=lanes, width=width)

    @property
    def height(self) -> int:
        return self.top + self.lane_height * len(self.lanes) + self.axis_height

    def x_of(self, moment: datetime) -> float:
        plot_width = self.width - self.label_width - self.right
        span = (self.end - self.start).total_seconds()
        return self.label_width + plot_width * (moment - self.start).total_seconds() / span

    def middle_of(self, outcome: str) -> float:
        return self.top + self.lane_height * self.lanes.index(outcome) + self.lane_height / 2

    def lane(self, outcome: str, label: str) -> SafeString:
        y = self.middle_of(outcome)
        return format_html(
            '<g class="lane"><line class="grid" x1="{x1}" y1="{y}" x2="{x2}" y2="{y}"/>'
            '<text class="lane-label" x="{lx}" y="{ty}">{label}</text></g>',
            x1=self.label_width,
            x2=self.width - self.right,
            y=_number(y),
            lx=8,
            ty=_number(y + 4),
            label=label,
        )

    def lease_bar(self, lease: LeaseSpan) -> SafeString:
        y = self.middle_of("lease")
        x1, x2 = self.x_of(lease.start), self.x_of(lease.end)
        return format_html(
            '<g class="lease"><title>{title}</title>'
            '<rect x="{x}" y="{y}" width="{w}" height="12" rx="3"/>'
            '<text class="token" x="{x}" y="{ty}">{token}</text></g>',
            title=lease.title,
            x=_number(x1),
            y=_number(y - 6),
            w=_number(max(x2 - x1, 2.0)),
            ty=_number(y - 9),
            token=f"#{lease.token}" if lease.token is not None else "",
        )

    def mark(self, mark: Mark) -> SafeString:
        y = self.middle_of(mark.outcome)
        x = self.x_of(mark.at)
        return format_html(
            '<g class="mark {outcome}"><title>{title}</title>'
            '<circle cx="{x}" cy="{y}" r="6"/>'
            '<text class="token" x="{x}" y="{ty}" text-anchor="middle">{token}</text></g>',
            outcome=mark.outcome,
            title=mark.title,
            x=_number(x),
            y=_number(y),
            ty=_number(y - 9),
            token=f"#{mark.token}" if mark.token is not None else "",
        )

    def time_axis(self) -> SafeString:
        local_start, local_end = localtime(self.start), localtime(self.end)
        same_day = local_start.date() == local_end.date()
        return format_html(
            '<g class="time-axis"><text x="{x1}" y="{y}">{start}</text>'
            '<text x="{x2}" y="{y}" text-anchor="end">{end}</text></g>',
            x1=self.label_width,
            x2=self.width - self.right,
            y=self.top + self.lane_height * len(self.lanes) + 16,
            # Labelled with the zone, as every time on the page is (TIME_ZONE on the lock page).
            start=f"{local_start:%Y-%m-%d %H:%M:%S %Z}",
            end=f"{local_end:%H:%M:%S %Z}" if same_day else f"{local_end:%Y-%m-%d %H:%M:%S %Z}",
        )
