"""Which way imports run (docs/architecture.md): the apps use ``locking``'s public names only,
and the frame (``hoa``) names none of the apps built on it.

The apps are not listed here: they are found the way the frame finds them, through the
registry. Each registered fenced operation's permission names its app (``django.apps``), so
an operation added tomorrow is scanned without a change to this file.
"""

import re
from pathlib import Path

from django.apps import AppConfig, apps

from hoa.operations import FencedOperation, operations

BASE_DIR = Path(__file__).resolve().parents[2]
FRAME = apps.get_containing_app_config(FencedOperation.__module__)


def apps_on_the_frame() -> list[AppConfig]:
    """The apps that declare a fenced operation, each found by its permission's app label."""
    labels = {operation.permission.partition(".")[0] for operation in operations()}
    return sorted((apps.get_app_config(label) for label in labels), key=lambda app: app.label)


def test_the_discovery_finds_every_app_built_on_the_frame():
    """Control: the scans below cover the three operations' apps, wherever they live."""
    found = {app.label: Path(app.path).relative_to(BASE_DIR) for app in apps_on_the_frame()}
    assert found == {
        "budgets": Path("tests/budgets"),
        "charges": Path("charges"),
        "vendors": Path("vendors"),
    }
    assert FRAME.label == "hoa"


# ``locking.models`` is one module callers import directly: Django loads models after the
# app registry, so ``locking/__init__.py`` cannot import them. The documented submodules
# (docs/locking/api.md) are the others, as ``redis.asyncio`` is redis-py's.
DOCUMENTED = r"(?:models|operators|receiving|sending|asyncio|audit|advisory|keys|tracing|testing)\b"
INTERNAL_IMPORT = re.compile(
    rf"^\s*(?:from\s+locking\.(?!{DOCUMENTED})\w+|import\s+locking\.(?!{DOCUMENTED})\w+)",
    re.MULTILINE,
)


def test_the_apps_import_locking_through_its_public_names_only():
    offenders = [
        f"{path.relative_to(BASE_DIR)}: {match.group().strip()}"
        for app in [FRAME, *apps_on_the_frame()]
        for path in sorted(Path(app.path).rglob("*.py"))
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


# hoa is the frame: it names no app built on it, not even in a string or a template: not
# its label, module, URL namespace or permission, nor its operation's name. The settings
# list the apps and the root URLconf includes them; nothing else may.
def names_of_the_apps() -> re.Pattern:
    names = {app.label for app in apps_on_the_frame()}
    names |= {app.name.rpartition(".")[2] for app in apps_on_the_frame()}
    names |= {operation.name for operation in operations()}
    return re.compile(rf"\b(?:{'|'.join(sorted(map(re.escape, names)))})\b")


FRAME_EXCEPTIONS = {"hoa/settings.py", "hoa/urls.py"}


def test_hoa_names_nothing_of_the_apps_above_it():
    app_names = names_of_the_apps()
    offenders = [
        f"{relative}:{number}: {line.strip()}"
        for path in sorted(Path(FRAME.path).rglob("*"))
        if path.suffix in {".py", ".html", ".txt"}
        and "migrations" not in path.parts
        and (relative := str(path.relative_to(BASE_DIR))) not in FRAME_EXCEPTIONS
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if app_names.search(line)
    ]
    assert offenders == []


def test_the_app_name_scan_finds_a_name():
    """Control: a URL namespace, an import, a permission string and an operation's name
    are all caught, for each app the registry found."""
    app_names = names_of_the_apps()
    lines = [
        "{% url 'vendors:complaint' 1 %}",
        "from charges.models import X",
        "'budgets.approve_budget'",
        "from tests.budgets import services",
        'resource = "budget-approval:org:1:2027"',
        "f'monthly-charges:{org}'",
    ]
    assert [line for line in lines if not app_names.search(line)] == []
    assert not app_names.search("monthly charge totals")
    assert not app_names.search("past its audit budget")  # hoa's own word, not the app


# hoa.web (the staff pages) and hoa.ops (the operators' pages, health, metrics) are two
# rooms of the frame: what both need lives beside them in hoa (hoa.paging, hoa.answers).
ROOMS = ("web", "ops")


def imports_between_the_rooms(texts: dict[str, str]) -> list[str]:
    found = []
    for where, text in texts.items():
        room = where.split("/")[1]
        other = next(r for r in ROOMS if r != room)
        pattern = re.compile(rf"^\s*(?:from|import)\s+hoa\.{other}\b", re.MULTILINE)
        found += [f"{where}: {m.group().strip()}" for m in pattern.finditer(text)]
    return found


def test_hoa_web_and_hoa_ops_import_nothing_of_each_other():
    texts = {
        str(path.relative_to(BASE_DIR)): path.read_text()
        for room in ROOMS
        for path in sorted((Path(FRAME.path) / room).rglob("*.py"))
    }
    assert texts, "no module found in hoa/web or hoa/ops"
    assert imports_between_the_rooms(texts) == []


def test_the_room_scan_finds_an_import_of_the_other_room():
    """Control: both directions are caught, an import of hoa's own modules is not."""
    texts = {
        "hoa/ops/views.py": "from hoa.web.lists import clamped_page\nfrom hoa.paging import x\n",
        "hoa/web/views.py": "    import hoa.ops.metrics_view\nfrom hoa.answers import y\n",
    }
    assert imports_between_the_rooms(texts) == [
        "hoa/ops/views.py: from hoa.web",
        "hoa/web/views.py: import hoa.ops",
    ]
