"""locking's documentation site (`make docs`): docs/locking/ built by Sphinx with every
warning an error. The site builds clean, and each thing that must fail the build does: a
broken link or anchor, a docstring of locking that does not render, a public name that the
API reference leaves out or that has no docstring.

Each control builds a copy of docs/locking/ and of the locking package (as the sdist lays
them out) with one thing made wrong, through the same `make docs` (DOCS_SRC, DOCS_OUT).
"""

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import locking
from locking import conf
from locking.documentation import DOCS_URL

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "locking"


def make_docs(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "make",
            "-s",
            "--no-print-directory",
            "docs-locking",
            f"DOCS_SRC={source}",
            f"DOCS_OUT={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def copy_of_the_docs(tmp_path: Path) -> Path:
    """docs/locking/ and the locking package, side by side as in the checkout; returns the
    copy of docs/locking/."""
    ignore = shutil.ignore_patterns("__pycache__", "tests")
    shutil.copytree(ROOT / "locking", tmp_path / "locking", ignore=ignore)
    shutil.copytree(DOCS, tmp_path / "docs" / "locking", ignore=ignore)
    return tmp_path / "docs" / "locking"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} in {path}"
    path.write_text(text.replace(old, new))


@pytest.mark.slow
def test_the_site_builds_without_a_warning_with_every_page_and_every_public_name(tmp_path):
    result = make_docs(DOCS, tmp_path / "site")
    assert (result.returncode, result.stderr) == (0, "")
    built = {path.stem for path in (tmp_path / "site").glob("*.html")}
    assert built - {"genindex", "search"} == {path.stem for path in DOCS.glob("*.md")}
    api = (tmp_path / "site" / "api.html").read_text()
    assert [name for name in locking.__all__ if f'id="locking.{name}"' not in api] == []
    # Documented where locking exports them, not where they are defined.
    assert 'id="locking.lock.FenceLock"' not in api


@pytest.mark.slow
def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    docs = copy_of_the_docs(tmp_path)
    with (docs / "using.md").open("a") as page:
        page.write("\nSee [the fence](fences) and [its table](fence.md#every-way-out).\n")
    result = make_docs(docs, tmp_path / "site")
    assert result.returncode != 0
    assert "using.md" in result.stderr
    assert "cross-reference target not found: 'fences'" in result.stderr
    assert "every-way-out" in result.stderr


@pytest.mark.slow
def test_a_docstring_that_does_not_render_fails_the_build(tmp_path):
    docs = copy_of_the_docs(tmp_path)
    edit(
        tmp_path / "locking" / "keys.py",
        "def lock_key(resource: str) -> str:\n",
        "def lock_key(resource: str) -> str:\n"
        '    """Return the key of ``resource``\'s lease.\n\n'
        "    =====  =====\n    key    what\n    =====  =====\n"
        '    lock:  the lease   it holds\n    """\n',
    )
    result = make_docs(docs, tmp_path / "site")
    assert result.returncode != 0
    assert "docstring of locking." in result.stderr
    assert "lock_key:3: ERROR: Malformed table." in result.stderr


@pytest.mark.slow
def test_a_public_name_left_out_of_the_api_reference_fails_the_build(tmp_path):
    docs = copy_of_the_docs(tmp_path)
    edit(docs / "api.md", ".. autofunction:: locking.keys.fence_key\n", "")
    result = make_docs(docs, tmp_path / "site")
    assert result.returncode != 0
    assert "locking.keys.fence_key is public but not in the API reference" in result.stderr


@pytest.mark.slow
def test_a_public_name_without_a_docstring_fails_the_build(tmp_path):
    docs = copy_of_the_docs(tmp_path)
    keys = tmp_path / "locking" / "keys.py"
    text = keys.read_text()
    start = text.index('    """Return the Redis key of ``resource``\'s lease')
    keys.write_text(text[:start] + text[text.index("\n", start) + 1 :])
    result = make_docs(docs, tmp_path / "site")
    assert result.returncode != 0
    assert "locking.keys.lock_key has no docstring for the API reference" in result.stderr


def words(text: str) -> str:
    return " ".join(text.split())


def test_every_setting_is_described_once_and_the_docstring_lists_each_with_its_default():
    assert list(conf.DESCRIPTIONS) == list(conf.SETTING_NAMES)
    doc = words(conf.__doc__)
    for name in conf.SETTING_NAMES:
        entry = f"``{name}`` (default {conf.describe_default(name)}) {conf.DESCRIPTIONS[name]}"
        assert words(entry) in doc, name
    assert "``LOCK_FENCE_EVENT_RETENTION_DAYS`` (default ``90``)" in doc
    assert "``LOCK_REDIS_URL`` (default ``REDIS_URL``, else ``'redis://127.0.0.1:6379/0'``)" in doc


def text_of(page: Path) -> str:
    """A built page's words, without markup; Sphinx's curly apostrophes made straight."""
    blocks = re.sub(r"</?(?:p|dl|dt|dd|div|li|h\d)\b[^>]*>", " ", page.read_text())
    return words(html.unescape(re.sub(r"<[^>]+>", "", blocks)).replace("\u2019", "'"))


def plain(rest: str) -> str:
    """reStructuredText's inline literals as the page shows them."""
    return re.sub(r"``([^`]*)``", r"\1", rest)


@pytest.mark.slow
def test_the_settings_page_is_made_from_locking_conf_and_a_setting_without_a_description_fails(
    tmp_path,
):
    result = make_docs(DOCS, tmp_path / "site")
    assert (result.returncode, result.stderr) == (0, "")
    page = text_of(tmp_path / "site" / "settings.html")
    for name in conf.SETTING_NAMES:
        described = f"{name} Default: {conf.describe_default(name)} {conf.DESCRIPTIONS[name]}"
        assert words(plain(described)) in page, name

    docs = copy_of_the_docs(tmp_path / "copy")
    edit(
        tmp_path / "copy" / "locking" / "conf.py",
        '    "LOCK_RECEIVER_SECRET": "",\n}',
        '    "LOCK_RECEIVER_SECRET": "",\n    "LOCK_NEW_THING": 1,\n}',
    )
    result = make_docs(docs, tmp_path / "copy" / "site")
    assert result.returncode != 0
    assert "LOCK_NEW_THING has no description in locking.conf.DESCRIPTIONS" in result.stderr


# --- links as the forge renders them: relative paths and GitHub's heading anchors ---

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (github-slugger's rule:
    lower case, punctuation dropped, spaces to hyphens, a repeat numbered)."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", without_code(markdown), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        candidate, repeat = slug, 0
        while candidate in anchors:
            repeat += 1
            candidate = f"{slug}-{repeat}"
        anchors.add(candidate)
    return anchors


def without_code(markdown: str) -> str:
    """The Markdown outside fenced code blocks."""
    return re.sub(r"(?ms)^```.*?^```[^\n]*$", "", markdown)


def broken_links(path: Path) -> list[str]:
    found = []
    for target in LINK.findall(without_code(path.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:: not the repository's
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            found.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in github_anchors(linked.read_text()):
            found.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    return found


LOCKING_MARKDOWN = [*sorted(DOCS.glob("*.md")), ROOT / "locking" / "README.md"]


def test_every_link_of_locking_s_docs_works_in_the_repository():
    assert [problem for path in LOCKING_MARKDOWN for problem in broken_links(path)] == []


def test_the_import_list_on_the_first_page_is_locking_s_whole_public_interface():
    index = (DOCS / "index.md").read_text()
    statement = re.sub(r"#.*", "", index.split("from locking import (", 1)[1])
    listed = re.findall(r"\b[A-Za-z_]\w*\b", statement.split(")", 1)[0])
    assert sorted(listed) == sorted(locking.__all__)


def test_the_package_readme_links_every_page_of_the_documentation_site():
    """The README is the package index's long description: it links the site's pages, each
    at the documentation base URL (locking/tests/test_standalone_docs.py checks the rest)."""
    readme = (ROOT / "locking" / "README.md").read_text()
    linked = {
        target.removeprefix(DOCS_URL).partition("#")[0] or "index.html"
        for target in LINK.findall(without_code(readme))
        if target.startswith(DOCS_URL)
    }
    assert [
        page.name for page in sorted(DOCS.glob("*.md")) if f"{page.stem}.html" not in linked
    ] == []
    assert f"<{DOCS_URL}>" in readme
