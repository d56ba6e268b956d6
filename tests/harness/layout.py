"""What a page looks like to a reader, measured in the browser: ``layout_problems(page)``.

It runs in the page (Playwright's ``page.evaluate``) and measures the laid-out text, not the
markup:

- **overlap**: two visible text nodes whose boxes (``Range.getClientRects`` of each node)
  share more than ``OVERLAP_PX2`` square pixels: text drawn over other text;
- **overflow**: an element whose content is wider than its box (``scrollWidth`` beyond
  ``clientWidth``) and that does not scroll it itself (``overflow-x: auto|scroll``): content
  cut off or spilling over its neighbours; the document itself wider than the viewport is
  reported the same way (the page scrolls sideways);
- **too wide**: a text box wider than the viewport;
- **split word**: a word drawn on more than one line, broken between two letters or digits
  ("Overflowin / g", what ``word-break: break-all``, ``overflow-wrap: anywhere`` or
  hyphenation do in a narrow cell). A break right after a hyphen, slash, colon, dot or "@"
  (``monthly-charges:org:3:2026-12``, an e-mail address, "Ruiz-Montgomery") is where a
  reader expects one and is not counted. Nor is a word wider than its box (a title of 200
  letters typed without a space): it cannot fit on any line and has to break. Its box is
  the nearest ancestor that is a box of its own, not an inline run nor a part of a table
  (a cell is as wide as its table lets it be: a word crushed in a narrow cell is measured
  against what holds the table, and counted);
- **broken date, time or phone**: ``2026-12-05``, ``2026-12-05 17:44 PST``, ``17:44`` or
  ``555-0142`` drawn on more than one line, wherever the break is (after a hyphen or at a
  space too): each is read as one thing.
- **crushed**: a table cell narrower than ``CRUSHED_PX`` with text in it (a column four
  pixels wide).

Text inside an intended scroll box (``overflow-x: auto|scroll``) is measured clipped to that
box: what is scrolled out of view is not drawn over anything. ``problems`` are short strings
naming the nodes, for an assertion message a person can act on.
"""

from __future__ import annotations

from pathlib import Path

OVERLAP_PX2 = 1.0
CRUSHED_PX = 24

_MEASURE = (Path(__file__).with_name("layout.js")).read_text(encoding="utf-8")


def layout_problems(page) -> list[str]:
    """Every layout problem of the page as it is drawn now (module docstring), as strings."""
    return page.evaluate(_MEASURE, {"overlapPx2": OVERLAP_PX2, "crushedPx": CRUSHED_PX})


def assert_readable(page, where: str = "") -> None:
    """Fail with the list of problems (and the page's URL) when there is any."""
    problems = layout_problems(page)
    if problems:
        listing = "\n  ".join(problems[:40])
        more = f"\n  … and {len(problems) - 40} more" if len(problems) > 40 else ""
        raise AssertionError(f"{where or page.url}: layout problems:\n  {listing}{more}")
