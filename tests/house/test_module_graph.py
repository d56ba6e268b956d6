"""The house's shape, read from the source with ``ast`` (issue 46): the product modules
import each other in no loop, and no function is over 60 lines.

The product is ``hoa``, ``charges``, ``vendors`` and ``locking`` (and, for the length rule,
``bench``); their ``tests`` and ``migrations`` are left out. locking's own test
(``locking/tests/test_boundaries.py``) checks locking alone, in the wheel too; this one
checks the project across its packages.
"""

import ast
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
PRODUCT = ("hoa", "charges", "vendors", "locking")
MEASURED = (*PRODUCT, "bench")
FUNCTION_LINES = 60


def sources(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Each module of ``packages`` under ``root`` by its dotted name, a package by its
    ``__init__.py``; tests and migrations left out."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if {"tests", "migrations"} & set(path.relative_to(root).parts):
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


# An edge is every import a module makes of another product module, wherever it stands: at
# the top or inside a function (a late import that only dodges a loop at run time is still
# the loop). Imports under ``if TYPE_CHECKING:`` are not edges: they never run, and an
# annotation may name what sits above it. (locking's own rule counts them; locking has
# none that close a loop.) ``from a.b import c`` is an edge to ``a.b.c`` when that is a
# module, else to ``a.b``; ``import a.b.c`` is an edge to the longest of ``a.b.c``, ``a.b``,
# ``a`` that is a module. Importing ``a.b.c`` also runs the package ``a.b`` first; that is
# Python's order, not something the module names, so it is no edge (a package's
# ``__init__`` that re-exports its modules would otherwise be in a loop with each).


def type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The import statements of ``tree`` under ``if TYPE_CHECKING:`` (or ``typing.``...)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in {
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        }:
            found |= {inner for statement in node.body for inner in ast.walk(statement)}
    return found


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules among ``modules`` that the module ``name`` (at ``path``) imports."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text(), str(path))
    skipped = type_checking_only(tree)
    edges = set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
                if (module := next((p for p in prefixes if p in modules), None)) is not None:
                    edges.add(module)
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
    return edges - {name}


def module_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    modules = sources(root, packages)
    return {name: imported(name, path, modules) for name, path in modules.items()}


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected set of more than one module, sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_product_modules_import_each_other_in_no_loop():
    """Imports inside functions count; imports under ``if TYPE_CHECKING:`` do not (they
    never run); see the rule above ``type_checking_only``."""
    graph = module_graph(BASE_DIR, PRODUCT)
    assert {"hoa.models.complaints", "vendors.operations", "locking.lease"} <= graph.keys()
    found = loops(graph)
    assert found == [], "import loops among: " + "; ".join(", ".join(loop) for loop in found)


def test_the_loop_rule_counts_late_imports_and_not_type_checking_ones(tmp_path):
    """Control: a loop closed by an import inside a function, and one across packages
    through ``from pkg import module``, are found; one closed under ``if TYPE_CHECKING:``
    is not, nor a package's ``__init__`` importing its own modules."""
    files = {
        "one/__init__.py": "from one.sub import thing\n",
        "one/a.py": "from one import b\n",
        "one/b.py": "def late():\n    from one.a import x\n",
        "one/c.py": "import typing\nif typing.TYPE_CHECKING:\n    from one.d import D\n",
        "one/d.py": "import one.c\n",
        "one/sub/__init__.py": "from .f import y\nthing = 1\n",
        "one/sub/f.py": "from two import g\n",
        "one/tests/test_x.py": "import one.h\n",
        "one/h.py": "import one.tests.test_x\n",
        "two/__init__.py": "",
        "two/g.py": "def late():\n    import one.sub.f.y\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = module_graph(tmp_path, ("one", "two"))
    assert graph["one.sub"] == {"one.sub.f"}  # a relative import, resolved
    assert graph["one.c"] == set()
    assert loops(graph) == [["one.a", "one.b"], ["one.sub.f", "two.g"]]


def functions_over(limit: int, root: Path, packages: tuple[str, ...]) -> list[str]:
    found = []
    for path in sources(root, packages).values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {lines}")
    return sorted(found)


def test_no_function_of_the_product_or_the_bench_is_over_60_lines():
    """A function's length as a reader sees it: from its ``def`` line (decorators not
    counted) to its last line, docstring, comments and blank lines inside it included.
    Every ``def`` and ``async def`` counts, methods and functions nested in others too (a
    nested one's lines count in its parent's as well)."""
    found = functions_over(FUNCTION_LINES, BASE_DIR, MEASURED)
    assert found == [], "functions over 60 lines:\n" + "\n".join(found)


def test_the_length_rule_counts_from_def_to_the_last_line(tmp_path):
    """Control: a decorated method and a nested async function of 4 lines are found, a
    3-line function is not, nor a function in tests or migrations."""
    (tmp_path / "one" / "tests").mkdir(parents=True)
    (tmp_path / "one" / "migrations").mkdir()
    long = "def long():\n    x = 1\n\n    return x\n"
    (tmp_path / "one" / "tests" / "test_a.py").write_text(long)
    (tmp_path / "one" / "migrations" / "0001.py").write_text(long)
    (tmp_path / "one" / "a.py").write_text(
        "class A:\n"
        "    @property\n"
        "    @staticmethod\n"
        "    def method():\n"
        '        """Doc."""\n'
        "        # a comment\n"
        "        return 1\n"
        "\n"
        "def short():\n"
        "    async def inner():\n"
        "        x = 1\n"
        "\n"
        "        return x\n"
    )
    assert functions_over(3, tmp_path, ("one",)) == [
        "one/a.py:10 inner: 4",
        "one/a.py:4 method: 4",
        "one/a.py:9 short: 5",
    ]
