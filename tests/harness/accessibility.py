"""What axe-core (Deque's accessibility engine) finds on a page: ``axe_problems(page)``.

The engine is the ``axe.min.js`` that the PyPI package ``axe-playwright-python`` ships (no
download at test time); it runs in the page through Playwright, as the layout measure does
(``tests.harness.layout``). Only the serious and critical findings count: those keep a
person from reading or using the page (text without enough contrast, a control without a
name, a landmark or list that is not one).
"""

from __future__ import annotations

from pathlib import Path

import axe_playwright_python

AXE_SCRIPT = (Path(axe_playwright_python.__file__).with_name("axe.min.js")).read_text(
    encoding="utf-8"
)
COUNTED = ("serious", "critical")


def axe_problems(page, impacts: tuple[str, ...] = COUNTED) -> list[str]:
    """Each violation of ``impacts`` on the page as drawn now: rule, impact, the nodes."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_SCRIPT)
    results = page.evaluate(
        "() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations)"
    )
    return [
        f"axe {violation['id']} ({violation['impact']}): "
        + "; ".join(" ".join(node["target"]) for node in violation["nodes"][:5])
        for violation in results
        if violation["impact"] in impacts
    ]
