"""Sphinx configuration of locking's documentation site: `make docs` builds docs/locking/
into docs/_build/locking/ with every warning an error (a broken link, a docstring that does
not render, a public name left out of the API reference).

The pages are Markdown (MyST), so they read the same on a forge as on the site; the API
reference is autodoc over the names of ``locking.__all__``, imported from the checkout
(or the unpacked sdist) beside this directory, with Django set up but no database opened.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE / "_ext")]

import django  # noqa: E402
from django.conf import settings  # noqa: E402

# Enough of a project for locking's modules to import: its models need their apps, and
# nothing here connects to PostgreSQL or Redis.
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "locking"],
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "docs"}},
)
django.setup()

import locking  # noqa: E402

project = "django-fenced-writes"
author = "The HOA platform authors"
copyright = "2026, The HOA platform authors"
version = release = locking.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxcontrib.mermaid",
    "locking_docs",  # _ext/locking_docs.py: the settings reference, the API reference's checks
]
exclude_patterns = ["_ext"]
root_doc = "index"

# Markdown: GitHub's heading anchors (fence.md#every-way-in works on the forge and here),
# ```mermaid fences drawn as diagrams.
myst_heading_anchors = 3
myst_fence_as_directive = ["mermaid"]
# Pygments cannot lex the SQL blocks whose placeholders are "…" and draws them in its relaxed
# mode, which reads the same; every other warning is an error.
suppress_warnings = ["misc.highlighting_failure"]

# The API reference documents each public name where locking exports it (locking.FenceLock),
# never by the module that defines it (locking_docs checks that every one is there).
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True}
add_module_names = False
python_use_unqualified_type_names = True

html_theme = "furo"
html_title = f"django-fenced-writes {release}"
html_show_sourcelink = False
# One module (locking) would make a module index of one line.
html_domain_indices = False
