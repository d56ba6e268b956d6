"""Docs that stand outside this repository (issue 45, item 4): what the wheel says to a
reader points at the documentation site, never at a file of the repository it was built in.

The wheel's METADATA (its URLs, its long description), every hint and message of the
package (and the checks' hints), and no page of the site naming a file of the platform.
METADATA is the installed wheel's under make test-locking-matrix, else dist/'s (skipped if
none, or stale); the pages are the checkout's (the wheel carries none).
"""

import ast
import re
import zipfile
from email.message import Message
from email.parser import Parser
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core import checks
from django.test import override_settings

import locking
from locking import fenced_checks
from locking.documentation import DOCS_URL, anchor
from locking.tests.support import INSTALLED, SOURCE_ROOT
from locking.tests.testapp.models import FencedThing

TESTS = __name__.rsplit(".", 1)[0]  # locking.tests, or locking_tests against the wheel
PACKAGE = Path(locking.__file__).resolve().parent
DOCS = SOURCE_ROOT / "docs" / "locking"
PROJECT_URLS = ("Documentation", "Changelog", "Source", "Issues")

# A file of the platform, in a page: its apps' directories and modules (``hoa/fenced.py``,
# ``hoa.ops.lockscopes``; not ``hoa.W001``, a check id, or ``hoa.Complaint``, a model),
# its tests (not ``locking/tests/``), benchmarks, deployment files and documentation (not
# ``docs/locking``, the site's own sources, nor ``docs/_build``, where it is built).
PLATFORM_FILE = re.compile(
    r"(?<![\w/.-])(?:hoa|charges|vendors|tests|bench|deploy)/[\w./-]*"
    r"|(?<![\w/.-])docs/(?!locking\b|_build\b)[\w.-]+"
    r"|\bbenchmarks\.md\b"
    r"|(?<![\w.])(?:hoa|charges|vendors)\.[a-z_]+"
)
# A repository path, in what the wheel itself says (its hints, messages and long
# description): the above, any docs/ or scripts/ path, a Markdown file, a path upwards.
REPOSITORY_PATH = re.compile(
    PLATFORM_FILE.pattern + r"|(?<![\w/.-])(?:docs|scripts)/|\b[\w.-]+\.md\b|\.\./"
)
URL = re.compile(r"https?://[^\s)<>\"'`]+")
# Markdown link and image targets ``[text](target)``, reference definitions ``[x]: target``,
# autolinks ``<target>`` and HTML ``href=``/``src=``.
LINK_TARGET = re.compile(
    r"\]\(\s*<?([^)\s>]+)"
    r"|^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)"
    r"|<([a-z][a-z0-9+.-]*:[^>\s]*)>"
    r"|\b(?:href|src)=[\"']([^\"']+)",
    re.MULTILINE,
)


def wheel_metadata() -> Message:
    """The METADATA of the wheel these tests run against, or of the one in dist/."""
    if INSTALLED:
        text = metadata.distribution("django-fenced-writes").read_text("METADATA")
        assert text, "the installed django-fenced-writes has no METADATA"
        return Parser().parsestr(text)
    wheel = SOURCE_ROOT / "dist" / f"django_fenced_writes-{locking.__version__}-py3-none-any.whl"
    if not wheel.is_file():
        pytest.skip(f"no {wheel.name} in dist/: make dist builds it")
    sources = [SOURCE_ROOT / "pyproject.toml", PACKAGE / "README.md"]
    if any(source.stat().st_mtime > wheel.stat().st_mtime for source in sources):
        pytest.skip(f"dist/{wheel.name} is older than what it is built from: make dist")
    with zipfile.ZipFile(wheel) as archive:
        name = f"django_fenced_writes-{locking.__version__}.dist-info/METADATA"
        return Parser().parsestr(archive.read(name).decode())


def project_urls(message: Message) -> dict[str, str]:
    return dict(
        (part.strip() for part in value.split(",", 1))
        for value in message.get_all("Project-URL") or []
    )


def link_targets(markdown: str) -> list[str]:
    return [
        next(group for group in match.groups() if group) for match in LINK_TARGET.finditer(markdown)
    ]


def relative_targets(markdown: str) -> list[str]:
    """The link targets of ``markdown`` that are neither absolute http(s) nor an anchor."""
    return [
        target
        for target in link_targets(markdown)
        if not (urlsplit(target).scheme in ("http", "https") and urlsplit(target).netloc)
        and not target.startswith("#")
    ]


def repository_paths(text: str, pattern: re.Pattern = REPOSITORY_PATH) -> list[str]:
    """What ``text`` names of the repository, its URLs left out (a URL's path is the site's)."""
    return [match.group(0) for match in pattern.finditer(URL.sub(" ", text))]


def foreign_urls(text: str) -> list[str]:
    """The http(s) URLs of ``text`` that are not pages of the documentation site."""
    return [url for url in URL.findall(text) if not url.startswith(DOCS_URL)]


# --- the pages: their titles and headings (the checkout's; the wheel carries none) -----


def headings(page: Path) -> list[tuple[int, str]]:
    """``(level, text)`` of each Markdown heading of ``page``, code blocks left out."""
    found, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(#{1,6}) (.+)", line)):
            found.append((len(match.group(1)), match.group(2).replace("`", "").strip()))
    return found


def page_problem(title: str, page: str, section: str = "") -> str | None:
    """What is wrong with a pointer to ``page``'s ``section`` under the title ``title``."""
    path = DOCS / f"{page}.md"
    if not path.is_file():
        return f"no page {page!r} ({path.name})"
    found = headings(path)
    if (1, title) not in found:
        return f"{page}.md is not titled {title!r} ({[t for level, t in found if level == 1]})"
    if section and section not in [text for level, text in found if level > 1]:
        return f"{page}.md has no section {section!r}"
    return None


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a page of the site, and its anchor as a heading of it."""
    parts = urlsplit(url.removeprefix(DOCS_URL))
    page = parts.path.removesuffix(".html") or "index"
    path = DOCS / f"{page}.md"
    if parts.netloc or (parts.path and not parts.path.endswith(".html")) or not path.is_file():
        return f"{url}: no page {page!r}"
    if parts.fragment and parts.fragment not in {anchor(text) for _, text in headings(path)}:
        return f"{url}: no heading of {page}.md has the anchor {parts.fragment!r}"
    return None


needs_the_pages = pytest.mark.skipif(
    not DOCS.is_dir(), reason="the pages are the checkout's and the sdist's, not the wheel's"
)


# --- the wheel's metadata -------------------------------------------------------------


def test_the_wheel_names_its_documentation_changelog_source_and_issues():
    urls = project_urls(wheel_metadata())
    assert sorted(label for label in PROJECT_URLS if label not in urls) == []
    assert urls["Documentation"] == DOCS_URL
    assert urls["Changelog"].startswith(DOCS_URL)
    assert [url for url in urls.values() if not url.startswith("https://")] == []


def test_the_long_description_links_absolutely_and_names_no_repository_path():
    description = wheel_metadata().get_payload()
    assert description.startswith("# django-fenced-writes")
    targets = link_targets(description)
    assert len(targets) > 10  # the page links; a pattern that finds none proves nothing
    assert relative_targets(description) == []
    assert repository_paths(description) == []
    assert any(url.startswith(DOCS_URL) for url in targets)


@needs_the_pages
def test_the_long_description_links_pages_and_headings_that_exist():
    description = wheel_metadata().get_payload()
    problems = [url_problem(url) for url in link_targets(description) if url.startswith(DOCS_URL)]
    assert [problem for problem in problems if problem] == []


# --- hints and messages -----------------------------------------------------------------


def package_modules() -> list[Path]:
    """Every module the wheel ships (the checkout's package has its tests beside them)."""
    return sorted(
        path for path in PACKAGE.rglob("*.py") if "tests" not in path.relative_to(PACKAGE).parts
    )


def strings_said(tree: ast.AST) -> list[str]:
    """Every string constant of ``tree`` but its docstrings: what hints and messages say."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
    ]  # fmt: skip


def pointers(tree: ast.AST) -> list[ast.Call]:
    """The calls of ``locking.documentation.see`` in ``tree``."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == "see" or getattr(node.func, "attr", None) == "see")
    ]


def test_no_string_of_the_package_names_a_repository_path_or_a_foreign_page():
    """Strings, templates and docstrings of the wheel: what a hint, a message, an admin
    page or the API reference may say."""
    found = []
    for path in package_modules():
        source = path.read_text()
        name = path.relative_to(PACKAGE.parent).as_posix()
        found += [
            (name, s, p) for s in strings_said(ast.parse(source)) for p in repository_paths(s)
        ]
        found += [
            (name, s, url) for s in strings_said(ast.parse(source)) for url in foreign_urls(s)
        ]
        # Docstrings and comments are shipped too: no file of the platform there either.
        found += [(name, "", p) for p in repository_paths(source, PLATFORM_FILE)]
    for path in sorted((PACKAGE / "templates").rglob("*.html")):
        text = path.read_text()
        found += [(path.name, "", p) for p in repository_paths(text) + foreign_urls(text)]
    assert len(package_modules()) > 30  # the walk reads the package
    assert found == []


def test_every_pointer_to_the_documentation_names_a_page_by_its_title():
    calls = []
    for path in package_modules():
        for call in pointers(ast.parse(path.read_text())):
            assert all(isinstance(arg, ast.Constant) for arg in call.args), ast.unparse(call)
            calls.append((path.name, *(arg.value for arg in call.args)))
    assert len(calls) >= 4  # the checks' hints point at three pages
    if not DOCS.is_dir():
        pytest.skip("the pages are the checkout's and the sdist's, not the wheel's")
    problems = [(name, page_problem(*args)) for name, *args in calls]
    assert [(name, problem) for name, problem in problems if problem] == []


SQLITE = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}


class FencedThingElsewhere:
    """A database router that sends the test app's fenced model to the second database."""

    def db_for_write(self, model, **hints):
        return "second" if model._meta.label == "locking_testapp.FencedThing" else None

    db_for_read = db_for_write


# Configurations that fail every check of the settings, the URLconf and the models.
BROKEN = {
    "redis URL, numbers, callables, an unknown name": {
        "LOCK_REDIS_URL": "redis://127.0.0.1:6379/zero",
        "LOCK_REDIS_MIN_REPLICAS": -1,
        "LOCK_REDIS_SOCKET_TIMEOUT_SECONDS": "2",
        "LOCK_FENCE_EVENT_RETENTION_DAYS": 0,
        "LOCK_CLIENT_IP_CALLABLE": "nowhere.client_ip",
        "LOCK_SCOPES_CALLABLE": "nowhere.scopes",
        "LOCK_QUEUE": "jobs",
        "LOCK_REDIS_ULR": "redis://elsewhere",
        "ROOT_URLCONF": f"{TESTS}.urls_receiver_without_secret",
        "LOCK_RECEIVER_SECRET": "",
        "DATABASE_ROUTERS": [f"{__name__}.FencedThingElsewhere"],
    },
    "replicas that wait longer than the socket": {
        "LOCK_REDIS_MIN_REPLICAS": 1,
        "LOCK_REDIS_WAIT_TIMEOUT_MS": 5000,
        "LOCK_REDIS_URL": "ftp://127.0.0.1/",
        "LOCK_DATABASE": "nope",
    },
    "a database that is not PostgreSQL": {"LOCK_DATABASE": "lite"},
}


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.parametrize("overrides", list(BROKEN.values()), ids=list(BROKEN))
def test_the_hints_of_checks_in_broken_configurations_link_pages_of_the_site(settings, overrides):
    with override_settings(DATABASES={**settings.DATABASES, "lite": SQLITE}, **overrides):
        messages = [m for m in checks.run_checks() if (m.id or "").startswith("locking.")]
    messages.append(checks.Error(*fenced_checks._unguarded_message(FencedThing), id="E013"))
    assert len(messages) >= 3
    said = [f"{message.id}: {message.msg} {message.hint or ''}" for message in messages]
    assert [(text, repository_paths(text)) for text in said if repository_paths(text)] == []
    assert [(text, foreign_urls(text)) for text in said if foreign_urls(text)] == []
    links = [url for text in said for url in URL.findall(text)]
    assert links  # E013's at least
    if DOCS.is_dir():
        assert [problem for problem in map(url_problem, links) if problem] == []


# --- the pages --------------------------------------------------------------------------


def pages() -> list[Path]:
    """Every page of the site, and every file a page includes (the changelog)."""
    found = sorted(DOCS.glob("*.md"))
    included = [
        (page.parent / target).resolve()
        for page in found
        for target in re.findall(r"^```\{include\} (\S+)", page.read_text(), re.MULTILINE)
    ]
    return found + included


@needs_the_pages
def test_no_page_names_a_file_of_the_platform():
    found = [
        f"{page.name}:{number}: {match.group(0)}"
        for page in pages()
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for match in PLATFORM_FILE.finditer(URL.sub(" ", line))
    ]
    assert len(pages()) > 10 and PACKAGE / "CHANGELOG.md" in pages()
    assert found == []


def test_the_patterns_find_what_the_pages_and_hints_once_named():
    """The controls: each pattern finds what issue 45 found, and leaves locking's own
    names alone."""
    named = (
        "`hoa/fenced.py` claims before",
        "`tests/charges/test_charges_service.py` walks each order",
        "(1b in the platform's docs/benchmarks.md)",
        "`hoa.ops.lockscopes.lock_scopes`",
        "the platform's docs/reliability.md",
    )
    assert [text for text in named if not PLATFORM_FILE.search(text)] == []
    assert repository_paths("(docs/locking/epochs.md, Replicas)") != []
    assert repository_paths("see settings.md") != []
    own = (
        "`locking/tests/test_fence.py`",
        "`hoa.W001`, over its operation registry",
        "--model hoa.Complaint --pk 42",
        "`sphinx-build -W docs/locking <out>`",
        "make docs  # -> docs/_build/locking/index.html",
        f"See 'Settings' ({DOCS_URL}settings.html).",
        "imports nothing from `hoa`, `charges` or `vendors`",
    )
    assert [text for text in own if PLATFORM_FILE.search(URL.sub(" ", text))] == []
    assert relative_targets("[a](../docs/locking/fence.md) [b](#x) [c](https://e.org/)") == [
        "../docs/locking/fence.md"
    ]
    assert relative_targets('![d](img.png) <a href="x.html">e</a>\n[f]: fence.md\n') == [
        "img.png",
        "x.html",
        "fence.md",
    ]
    assert foreign_urls(f"see {DOCS_URL}fence.html and https://e.org/x") == ["https://e.org/x"]
