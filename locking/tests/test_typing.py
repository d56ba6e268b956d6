"""The consumer file mypy checks covers every public name (issue 36 item 1).

``make test-locking-matrix`` runs ``mypy --strict --disallow-any-expr`` on
locking/tests/typing/consumer.py against the installed wheel (scripts/locking_matrix.py).
That run proves only what the file uses: a name it leaves out could lose its types, or
gain an ``Any``, unseen. So every name of ``locking.__all__`` must be imported there and
appear in an ``assert_type(...)``, as the value checked or the type it must have.
"""

import ast
from pathlib import Path

import locking

CONSUMER = Path(__file__).resolve().parent / "typing" / "consumer.py"


def public_names_checked(source: str) -> tuple[set[str], set[str]]:
    """The names a consumer imports from ``locking``, and those of them that appear inside
    an ``assert_type`` call."""
    tree = ast.parse(source)
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "locking"
        for alias in node.names
    }
    asserted = {
        name.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "assert_type"
        for name in ast.walk(node)
        if isinstance(name, ast.Name)
    }
    return imported, asserted & imported


def test_the_consumer_checks_the_type_of_every_public_name():
    imported, asserted = public_names_checked(CONSUMER.read_text())
    assert sorted(set(locking.__all__) - imported) == []
    assert sorted(set(locking.__all__) - asserted) == []


def test_a_name_imported_but_never_asserted_is_found():
    """Control: a name used outside ``assert_type`` does not count; one used inside does,
    as the value or as the type."""
    source = (
        "from locking import FenceLock, Lease, holders\n"
        "lock = FenceLock()\n"
        "assert_type(lock.acquire('r', ttl=TTL), Lease)\n"
        "print(holders())\n"
    )
    assert public_names_checked(source) == ({"FenceLock", "Lease", "holders"}, {"Lease"})
