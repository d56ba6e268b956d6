"""Sphinx configuration of the product's documentation site for office staff and operators:
`make docs` builds docs/office/ into docs/_build/office/, beside locking's site, with every
warning an error (a broken link, an image that is not there).

Each page is an include of the Markdown file of the same name in docs/ (the staff guide,
operations, the scheduled jobs, the design), so the repository keeps one copy of each and
its links; links into locking's pages lead to locking's site (_ext/office_docs.py).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "HOA platform"
author = "The HOA platform authors"
copyright = "2026, The HOA platform authors"

extensions = [
    "myst_parser",
    "sphinxcontrib.mermaid",
    "office_docs",  # _ext/office_docs.py: links into locking's site
]
exclude_patterns = ["_ext"]
root_doc = "index"

# GitHub's heading anchors, as in locking's site; ```mermaid fences drawn as diagrams.
myst_heading_anchors = 3
myst_fence_as_directive = ["mermaid"]
# Pygments draws the blocks it cannot lex (the shell sessions with "…") in its relaxed mode.
suppress_warnings = ["misc.highlighting_failure"]

html_theme = "furo"
html_title = "HOA platform: staff guide and operations"
html_show_sourcelink = False
