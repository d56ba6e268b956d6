"""Which way imports run (ARCHITECTURE.md): the apps use ``locking``'s public names only."""

import re
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
CALLERS = ("hoa", "charges", "vendors")
# ``locking.models`` is the one module callers import directly: Django loads models after
# the app registry, so ``locking/__init__.py`` cannot import them.
INTERNAL_IMPORT = re.compile(
    r"^\s*(?:from\s+locking\.(?!models\b)\w+|import\s+locking\.(?!models\b)\w+)", re.MULTILINE
)


def test_the_apps_import_locking_through_its_public_names_only():
    offenders = [
        f"{path.relative_to(BASE_DIR)}: {match.group().strip()}"
        for app in CALLERS
        for path in sorted((BASE_DIR / app).rglob("*.py"))
        for match in INTERNAL_IMPORT.finditer(path.read_text())
    ]
    assert offenders == []


def test_the_scan_finds_an_internal_import():
    """Control: the pattern above catches what it is for, and lets the models through."""
    text = (
        "from locking import FenceLock\n"
        "from locking.models import FenceEvent\n"
        "from locking.management.pruning import PruneCommand\n"
        "    import locking.admin\n"
    )
    found = [m.group().strip() for m in INTERNAL_IMPORT.finditer(text)]
    assert found == ["from locking.management", "import locking.admin"]


# hoa is the frame: it names no app built on it, not even in a string or a template. The
# settings list the apps and the root URLconf includes them; nothing else may.
APP_NAMES = re.compile(r"\b(?:charges|vendors)\b")
FRAME_EXCEPTIONS = {"hoa/settings.py", "hoa/urls.py"}


def test_hoa_names_nothing_of_the_apps_above_it():
    offenders = [
        f"{relative}:{number}: {line.strip()}"
        for path in sorted((BASE_DIR / "hoa").rglob("*"))
        if path.suffix in {".py", ".html", ".txt"}
        and "migrations" not in path.parts
        and (relative := str(path.relative_to(BASE_DIR))) not in FRAME_EXCEPTIONS
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if APP_NAMES.search(line)
    ]
    assert offenders == []


def test_the_app_name_scan_finds_a_name():
    """Control: a URL namespace, an import and a permission string are all caught."""
    lines = ["{% url 'vendors:complaint' 1 %}", "from charges.models import X", "'charges.x'"]
    assert all(APP_NAMES.search(line) for line in lines)
    assert not APP_NAMES.search("monthly charge totals")
