"""No comment or doc points readers outside the repository (issue 37, item 8).

Every ``*.md`` a tracked file names exists in the checkout (beside the file, at the root,
in ``docs/``, in ``docs/locking/`` or in ``locking/``), and nothing points at the steering
folder (``shared/``) or at the ``ARCHITECTURE.md`` the repository does not have: a reader
who follows a pointer finds what it names.
"""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = re.compile(r"\.(py|md|html|sh|txt|toml|ya?ml|cfg|js|css)$|(^|/)Makefile$")
DOC_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]*\w\.md)\b")
OUTSIDE = re.compile(r"(?<![\w/.-])shared/|ARCHITECTURE\.md")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if TEXT.search(name) and (ROOT / name).is_file()]


def resolves(name: str, where: Path) -> bool:
    bases = (where.parent, ROOT, ROOT / "docs", ROOT / "docs" / "locking", ROOT / "locking")
    return any((base / name).is_file() for base in bases)


def test_every_md_a_file_names_is_in_the_repository():
    missing = []
    for path in tracked_text_files():
        if path.name == Path(__file__).name:
            continue  # it names what it looks for
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if "://" in line:
                line = re.sub(r"\w+://\S+", "", line)
            for name in DOC_NAME.findall(line):
                if not resolves(name, path):
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {name}")
            if OUTSIDE.search(line):
                missing.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert missing == []


WALK_ROW = re.compile(r"^\| (\d+|↑|—) \| `([^`]+)` \| (.*) \|$")


def test_the_architecture_walks_name_files_and_functions_that_exist():
    """docs/architecture.md's two walks were measured by following the code: every file a
    row names exists, and it defines at least one of the names the row says the reader
    follows there, so a walk that the code has left behind fails here."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    walks = text.split("### Two walks through the code", 1)[1].split("\n## ", 1)[0]
    rows = [WALK_ROW.match(line) for line in walks.splitlines()]
    rows = [row for row in rows if row]
    assert len(rows) >= 30
    stale = []
    for row in rows:
        path = ROOT / row[2]
        if not path.is_file():
            stale.append(f"{row[2]}: no such file")
            continue
        source = path.read_text(encoding="utf-8")
        tokens = re.findall(r"`([^`]+)`", row[3])
        names = {
            token.split(".")[-1] for token in tokens if re.fullmatch(r"[A-Za-z_][\w.]*", token)
        }
        defined = {
            name
            for name in names
            if re.search(rf"^\s*(?:def|class|async def) {name}\b|^{name} = ", source, re.M)
        }
        # A route or a converter is named by what the file says, not a definition.
        quoted = {token for token in tokens if token.strip("<>") in source}
        if not defined and not quoted:
            stale.append(f"{row[2]}: none of {sorted(names)} is defined there")
    assert stale == []
