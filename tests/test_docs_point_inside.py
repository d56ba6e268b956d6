"""No comment or doc points readers outside the repository (issue 37, item 8).

Every ``*.md`` a tracked file names exists in the checkout (beside the file, at the root,
in ``docs/`` or in ``locking/``), and nothing points at the steering folder (``shared/``)
or at the ``ARCHITECTURE.md`` the repository does not have: a reader who follows a pointer
finds what it names.
"""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = re.compile(r"\.(py|md|html|sh|txt|toml|ya?ml|cfg|js|css)$|(^|/)Makefile$")
DOC_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]*\w\.md)\b")
OUTSIDE = re.compile(r"(?<![\w/.-])shared/|ARCHITECTURE\.md")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if TEXT.search(name) and (ROOT / name).is_file()]


def resolves(name: str, where: Path) -> bool:
    bases = (where.parent, ROOT, ROOT / "docs", ROOT / "locking")
    return any((base / name).is_file() for base in bases)


def test_every_md_a_file_names_is_in_the_repository():
    missing = []
    for path in tracked_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if "://" in line:
                line = re.sub(r"\w+://\S+", "", line)
            for name in DOC_NAME.findall(line):
                if not resolves(name, path):
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {name}")
            if OUTSIDE.search(line) and path.name != Path(__file__).name:
                missing.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert missing == []
