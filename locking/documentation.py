"""Where locking's documentation is, for the hints and messages that send a reader there.

The wheel ships none of the documentation's pages: a hint names a page by its title and
links it under ``DOCS_URL``, the Documentation URL of the distribution's metadata
(``[project.urls]`` of pyproject.toml: the two must stay equal, and a test reads both).
"""

import re

DOCS_URL = "https://django-fenced-writes.readthedocs.io/en/latest/"

# The site's heading anchors are GitHub's (MyST's ``myst_heading_anchors``): lower case,
# spaces to hyphens, every other character but letters, digits, "_" and "-" dropped.
_NOT_IN_ANCHOR = re.compile(r"[^\w\- ]")


def anchor(heading: str) -> str:
    """The anchor of a section titled ``heading`` (as written, without backticks)."""
    return _NOT_IN_ANCHOR.sub("", heading.lower().replace(" ", "-"))


def see(title: str, page: str, section: str = "") -> str:
    """A pointer to the page ``page`` (its name in the site, ``settings``) titled
    ``title``, at its section ``section`` if given: ``'Settings' (https://…/settings.html)``.
    """
    url = f"{DOCS_URL}{page}.html"
    if not section:
        return f"'{title}' ({url})"
    return f"'{title}', section '{section}' ({url}#{anchor(section)})"
