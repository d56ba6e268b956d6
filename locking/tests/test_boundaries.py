"""locking stands alone: it imports nothing of the project, and ``__all__`` is its interface."""

import ast
import functools
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import FunctionType

import pytest
from django.core.management import call_command

import locking
import locking.asyncio
from locking.tests.support import INSTALLED, SOURCE_ROOT

PACKAGE = Path(locking.__file__).resolve().parent

# What lies beside the installed wheel is other distributions, not the project: the
# boundary is checked in the checkout, and the wheel's file list by scripts/check_wheel.py.
in_the_checkout = pytest.mark.skipif(
    INSTALLED, reason="the project's packages are beside locking in the checkout only"
)


def project_packages(source_root: Path) -> tuple[str, ...]:
    """The project's packages: the top-level ones beside locking in the checkout, found
    rather than named (a new app is covered the day it is added), and its tests."""
    found = {init.parent.name for init in source_root.glob("*/__init__.py")}
    return tuple(sorted((found - {PACKAGE.name}) | {"tests"}))


# None of them may be named by locking.
PROJECT_PACKAGES = project_packages(SOURCE_ROOT)
IMPORT_OF_THE_PROJECT = re.compile(
    rf"^\s*(?:from|import)\s+(?:{'|'.join(PROJECT_PACKAGES)})(?=[.\s]|$)", re.MULTILINE
)


@in_the_checkout
def test_no_module_of_locking_names_a_project_package():
    """Every line that imports, the code of child processes in strings included."""
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}: {match.group().strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for match in IMPORT_OF_THE_PROJECT.finditer(path.read_text())
    ]
    assert offenders == []


@in_the_checkout
def test_the_scan_finds_an_import_of_the_project():
    """Control: the pattern above does catch the imports it is for."""
    text = "import os\nfrom hoa.models import Complaint\n    import charges.services\n"
    found = [m.group().strip() for m in IMPORT_OF_THE_PROJECT.finditer(text)]
    assert found == ["from hoa", "import charges"]
    assert IMPORT_OF_THE_PROJECT.search("from hoarding import x") is None


@in_the_checkout
def test_the_project_packages_are_found_beside_locking(tmp_path):
    """Control: every top-level package of a checkout but locking, and the tests; a folder
    without ``__init__.py`` is no package. This checkout has packages beside locking."""
    for name in ("locking", "frame", "billing"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").touch()
    (tmp_path / "docs").mkdir()
    (tmp_path / "manage.py").touch()
    assert project_packages(tmp_path) == ("billing", "frame", "tests")
    assert "locking" not in PROJECT_PACKAGES and len(PROJECT_PACKAGES) > 1


# Import every module of locking, its tests included, with settings that install nothing of
# the project; then list what of the project got imported along the way.
IMPORT_EVERYTHING = """
import importlib, pkgutil, sys
import django
django.setup()
import locking
for module in pkgutil.walk_packages(locking.__path__, "locking."):
    importlib.import_module(module.name)
project = {name.split(".")[0] for name in sys.modules} & set(sys.argv[1:])
print(sorted(project))
"""


@in_the_checkout
@pytest.mark.slow
def test_importing_all_of_locking_imports_nothing_of_the_project():
    env = {"DJANGO_SETTINGS_MODULE": "locking.tests.settings", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING, *PROJECT_PACKAGES],
        cwd=SOURCE_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_all_is_the_fence_and_every_name_resolves():
    """``locking.__all__`` is the fence, at most 20 names; the rest are in documented
    submodules, each with an ``__all__`` of its own."""
    assert sorted(locking.__all__) == [
        "FenceLock",
        "FencingToken",
        "InstallFenceGuard",
        "Lease",
        "LeaseLost",
        "LeaseState",
        "LeaseUncertain",
        "LeasedAttempt",
        "LockError",
        "LockHeld",
        "LockUnavailable",
        "Outcome",
        "StaleFencingToken",
        "advance_fence",
        "claim_fence",
        "insert_fenced",
        "post_fenced",
        "prepare_fences",
        "run_fenced",
        "unfenced_writes",
    ]
    assert len(locking.__all__) <= 20
    assert all(getattr(locking, name, None) is not None for name in locking.__all__)


def test_a_name_that_moved_still_imports_from_locking_with_a_warning():
    """Up to 3.0.0 these were in ``locking.__all__``: each still resolves from ``locking``,
    to the same object as in its documented submodule, with a ``DeprecationWarning`` that
    says where it lives now."""
    import importlib

    for name, home in locking.MOVED.items():
        with pytest.warns(DeprecationWarning, match=rf"import it from locking\.{home}$"):
            old = getattr(locking, name)
        module = importlib.import_module(f"locking.{home}")
        assert name in module.__all__ and old is getattr(module, name), name
    with pytest.raises(AttributeError):
        locking.no_such_name  # noqa: B018


@pytest.mark.django_db
def test_the_test_models_need_no_new_migration():
    # makemigrations --check exits 1 when a model changed without a migration.
    call_command("makemigrations", "locking_testapp", "--check", "--dry-run", verbosity=0)


# docs/locking/internals.md, "The modules": one job per module, none over 650 lines. Read it here
# so that a module that outgrows its job is split, not the rule quietly dropped; the limit
# leaves room for one concern in one module (a lease: its state, its signal and the sync
# lease), which a reader following a request opens once instead of three times.
MODULE_LINES = 650


def modules_over(limit: int, package: Path) -> list[str]:
    return [
        f"{path.relative_to(package)}: {count} lines"
        for path in sorted(package.rglob("*.py"))
        if not {"tests", "migrations"} & set(path.relative_to(package).parts)
        and (count := len(path.read_text().splitlines())) > limit
    ]


def test_no_module_of_locking_is_over_650_lines():
    assert modules_over(MODULE_LINES, PACKAGE) == []


def test_the_length_rule_finds_a_long_module_and_skips_tests_and_migrations(tmp_path):
    """Control."""
    for name in ("long.py", "tests/test_long.py", "migrations/0001_long.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n" * 5)
    (tmp_path / "short.py").write_text("x = 1\n" * 4)
    assert modules_over(4, tmp_path) == ["long.py: 5 lines"]


# Issue 36 item 6: a lease is a small class, built with keywords. Everything it has counts,
# its bases' included (a mixin's methods are the class's methods), properties too.
LEASE_METHODS = 15


def methods_of(cls: type) -> list[str]:
    """Every method and property ``cls`` has, inherited ones included (``object``'s not)."""
    kinds = (FunctionType, property, staticmethod, classmethod, functools.cached_property)
    return sorted(
        {
            name
            for klass in cls.__mro__
            if klass is not object
            for name, value in vars(klass).items()
            if isinstance(value, kinds)
        }
    )


@pytest.mark.parametrize("lease_class", [locking.Lease, locking.asyncio.AsyncLease])
def test_a_lease_has_at_most_15_methods_and_a_keyword_only_constructor(lease_class):
    assert len(methods_of(lease_class)) <= LEASE_METHODS, methods_of(lease_class)
    parameters = list(inspect.signature(lease_class).parameters.values())
    assert parameters and {p.kind for p in parameters} == {inspect.Parameter.KEYWORD_ONLY}


def test_the_method_count_sees_a_mixins_methods_and_properties():
    """Control."""

    class Mixin:
        def mixed(self): ...

    class Base:
        @property
        def read(self): ...

        @staticmethod
        def static(): ...

    class Counted(Mixin, Base):
        slot = 1

        def __init__(self): ...

    assert methods_of(Counted) == ["__init__", "mixed", "read", "static"]


# Issue 36 item 6: locking's modules import each other in no loop. The graph is read from
# the source with ast, tests and migrations left out. An edge is every import a module
# makes of another of locking's modules, wherever it stands: at the top, inside a function
# (a late import that only dodges a loop at run time is still the loop), or under ``if
# TYPE_CHECKING:`` (a loop a type checker must untangle is still a loop a reader must).
# ``from locking.x import y`` is an edge to ``locking.x.y`` when that is a module, else to
# ``locking.x``. Importing ``locking.x.y`` also runs the package ``locking.x`` first; that
# is Python's order, not something the module names, so it is no edge (a package's
# ``__init__`` that re-exports its modules would otherwise be in a loop with each).


def module_graph(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of ``package`` it imports."""

    def name_of(path: Path) -> str:
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {
        name_of(path): path
        for path in sorted(package.rglob("*.py"))
        if not {"tests", "migrations"} & set(path.relative_to(package).parts)
    }
    graph = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1
                    up = here[: len(here) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        edges.add(f"{base}.{alias.name}")
                    elif base in modules:
                        edges.add(base)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The loops of ``graph``: each strongly connected set of more than one module (or a
    module that imports itself), sorted (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        found.append(sorted(component))
    return sorted(found)


def test_locking_modules_import_each_other_in_no_cycle():
    graph = module_graph(PACKAGE)
    assert {"locking.lock", "locking.lease", "locking.asyncio.lock"} <= graph.keys()
    assert cycles(graph) == []


def test_the_cycle_rule_counts_late_and_type_checking_imports(tmp_path):
    """Control: a loop closed by an import inside a function, one closed under ``if
    TYPE_CHECKING:``, and one through ``from pkg import module`` are each found; a
    package's ``__init__`` importing its own modules, and a name imported from a
    package's ``__init__``, are not loops."""
    files = {
        "__init__.py": "from pkg.sub import thing\n",
        "a.py": "from pkg import b\n",
        "b.py": "def late():\n    from pkg.a import x\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import D\n",
        "d.py": "import pkg.c\n",
        "e.py": "from pkg.sub.f import y\n",
        "sub/__init__.py": "from pkg.sub.f import y\nthing = 1\n",
        "sub/f.py": "from . import g\n",
        "sub/g.py": "from pkg import e\n",
        "tests/test_x.py": "import pkg.h\n",
        "h.py": "import pkg.tests.test_x\n",
    }
    for name, text in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    graph = module_graph(tmp_path / "pkg")
    assert graph["pkg.sub.f"] == {"pkg.sub.g"}  # a relative import, resolved
    assert cycles(graph) == [
        ["pkg.a", "pkg.b"],
        ["pkg.c", "pkg.d"],
        ["pkg.e", "pkg.sub.f", "pkg.sub.g"],
    ]
