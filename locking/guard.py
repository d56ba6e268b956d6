"""The fence guard: triggers on every fenced table, installed by a migration operation
(``InstallFenceGuard("invoice")`` in the owning app's migration; ``locking.E013`` and
``E014`` name a table without them).

``locking_fence_never_back`` keeps ``last_fence_token`` from going down whatever writes the
row, silently: ``Model.objects.filter(pk=7).update(last_fence_token=0)`` returns 1 and the
column keeps its value (read it back). ``locking_fence_undone`` refuses a row whose fence a
rolled-back savepoint took back; strict mode's ``locking_fence_strict`` a row its
transaction has not fenced. Each, and why: the documentation's 'The fence check' page.

A fence inside a savepoint registers an on-commit marker (Django drops it with a savepoint
that rolls back); ``watch`` adds an execute wrapper that, seeing ``ROLLBACK TO SAVEPOINT s``,
puts the rows whose fences ``s`` undid in ``locking.undone_fences``, for
``locking_fence_undone`` to refuse any later write of them.
"""

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

from django.db import connections, transaction
from django.db.migrations.operations.base import Operation
from django.db.transaction import TransactionManagementError

from locking.conf import setting

if TYPE_CHECKING:
    from django.db.backends.base.schema import BaseDatabaseSchemaEditor
    from django.db.migrations.state import ProjectState

NEVER_BACK = "locking_fence_never_back"
UNDONE = "locking_fence_undone"
TRIGGERS = (NEVER_BACK, UNDONE)
STRICT = "locking_fence_strict"  # strict mode's trigger, on the tables that ask for it

# Transaction-local settings of strict mode. The row (``table:pk``) the fence's statement is
# fencing now; the rows fenced in this transaction (space-separated, a space on each side);
# ``on`` in a block of ``unfenced_writes()``.
FENCING_SETTING = "locking.fencing"
FENCED_SETTING = "locking.fenced_rows"
UNFENCED_SETTING = "locking.unfenced"
UNDONE_SETTING = "locking.undone_fences"  # rows whose fences a savepoint rolled back

# Shared by every fenced table; the column (and the pk) are the trigger's argument.
_FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION {NEVER_BACK}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Runs only when the column would go down (the trigger's WHEN): keep the old value.
    RETURN jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0], to_jsonb(OLD) -> TG_ARGV[0]));
END
$$;
CREATE OR REPLACE FUNCTION {UNDONE}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    written text := TG_TABLE_NAME || ':' || (
        to_jsonb(CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END) ->> TG_ARGV[0]);
BEGIN
    IF position(' ' || written || ' ' IN current_setting('{UNDONE_SETTING}', true)) > 0 THEN
        RAISE EXCEPTION 'locking: the fence on % was undone by a rolled-back savepoint', written
            USING HINT = 'Keep advance_fence and the writes it protects in one atomic block.';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE FUNCTION {STRICT}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    written text := TG_TABLE_NAME || ':' || (to_jsonb(OLD) ->> TG_ARGV[0]);
    fenced text := coalesce(current_setting('{FENCED_SETTING}', true), '');
BEGIN
    IF TG_OP = 'UPDATE' AND current_setting('{FENCING_SETTING}', true) = written THEN
        -- The fence's own statement: from now on, this transaction has fenced the row.
        PERFORM set_config('{FENCING_SETTING}', '', true);
        IF position(' ' || written || ' ' IN fenced) = 0 THEN
            PERFORM set_config('{FENCED_SETTING}', fenced || ' ' || written || ' ', true);
        END IF;
    ELSIF position(' ' || written || ' ' IN fenced) = 0
        AND current_setting('{UNFENCED_SETTING}', true) IS DISTINCT FROM 'on' THEN
        RAISE EXCEPTION
            'locking: % of % in a transaction that has not fenced it (strict fence guard)',
            TG_OP, written
            USING HINT = 'Write the row in the transaction.atomic() block that called '
                'advance_fence() on it with the lease (or inserted it with insert_fenced()), '
                'after the fence. A refused fence (StaleFencingToken) lets nothing be written; '
                'an intended unfenced write goes in locking.unfenced_writes().';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;
"""


# What the fence's statements write into those settings (``pk``: the row's key column, as
# SQL). ``fencing_sql`` is the value of the fence column: the token, its one parameter.
FORGET_FENCING_SQL = f"SELECT set_config('{FENCING_SETTING}', '', true)"


def fencing_sql(table: str, pk: str) -> str:
    """The fence column's new value, marking the row as the one the statement fences."""
    row = f"{_literal(table + ':')} || {pk}::text"
    return f"CASE WHEN set_config('{FENCING_SETTING}', {row}, true) IS NOT NULL THEN %s END"


def fenced_sql(table: str, pk: str) -> str:
    """An expression that adds the row to the rows fenced in this transaction."""
    rows = f"coalesce(current_setting('{FENCED_SETTING}', true), '')"
    row = f"{_literal(f' {table}:')} || {pk}::text || ' '"
    return f"set_config('{FENCED_SETTING}', {rows} || {row}, true)"


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (a table name, in a statement built once)."""
    return "'" + text.replace("'", "''") + "'"


def install_sql(table: str, column: str, pk: str, quote, *, strict: bool = False) -> list[str]:
    """The statements that install the guard on ``table`` (names unquoted); strict or
    not, as ``strict`` says (a strict guard made plain loses its third trigger)."""
    return [
        _FUNCTIONS,
        f"DROP TRIGGER IF EXISTS {NEVER_BACK} ON {quote(table)}",
        f"CREATE TRIGGER {NEVER_BACK} BEFORE UPDATE OF {quote(column)} ON {quote(table)} "
        f"FOR EACH ROW WHEN (NEW.{quote(column)} < OLD.{quote(column)}) "
        f"EXECUTE FUNCTION {NEVER_BACK}('{column}')",
        f"DROP TRIGGER IF EXISTS {UNDONE} ON {quote(table)}",
        f"CREATE TRIGGER {UNDONE} BEFORE INSERT OR UPDATE OR DELETE ON {quote(table)} "
        f"FOR EACH ROW WHEN (current_setting('{UNDONE_SETTING}', true) <> '') "
        f"EXECUTE FUNCTION {UNDONE}('{pk}')",
        *(strict_sql(table, pk, quote) if strict else unstrict_sql(table, quote)),
    ]


def strict_sql(table: str, pk: str, quote) -> list[str]:
    """The statements that make the guard on ``table`` strict."""
    return [
        f"DROP TRIGGER IF EXISTS {STRICT} ON {quote(table)}",
        f"CREATE TRIGGER {STRICT} BEFORE UPDATE OR DELETE ON {quote(table)} "
        f"FOR EACH ROW EXECUTE FUNCTION {STRICT}('{pk}')",
    ]


def unstrict_sql(table: str, quote) -> list[str]:
    return [f"DROP TRIGGER IF EXISTS {STRICT} ON {quote(table)}"]


def uninstall_sql(table: str, quote) -> list[str]:
    return [f"DROP TRIGGER IF EXISTS {name} ON {quote(table)}" for name in (*TRIGGERS, STRICT)]


class InstallFenceGuard(Operation):
    """Install the fence guard (the module docstring) on ``model_name``'s table; with
    ``strict=True``, strict mode too.

    Reversible: unapplied, the plain guard's triggers are dropped (the shared functions
    stay, other tables use them); the strict one only loses strict mode and leaves the
    guard, which an earlier migration usually installed. It changes no model state, so
    ``makemigrations`` never writes it: add it by hand, once per fenced model, and once
    more with ``strict=True`` to make it strict.
    """

    reversible = True
    reduces_to_sql = True

    def __init__(self, model_name: str, strict: bool = False):
        self.model_name = model_name
        self.strict = strict

    def deconstruct(self) -> tuple[str, list[str], dict[str, object]]:
        return (self.__class__.__name__, [self.model_name], {"strict": True} if self.strict else {})

    def state_forwards(self, app_label: str, state: "ProjectState") -> None:
        pass

    def database_forwards(
        self,
        app_label: str,
        schema_editor: "BaseDatabaseSchemaEditor",
        from_state: "ProjectState",
        to_state: "ProjectState",
    ) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        opts = model._meta
        column = opts.get_field("last_fence_token").column
        quote = schema_editor.quote_name
        for statement in install_sql(
            opts.db_table, column, opts.pk.column, quote, strict=self.strict
        ):
            schema_editor.execute(statement, params=None)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: "BaseDatabaseSchemaEditor",
        from_state: "ProjectState",
        to_state: "ProjectState",
    ) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        table, quote = model._meta.db_table, schema_editor.quote_name
        sql = unstrict_sql(table, quote) if self.strict else uninstall_sql(table, quote)
        for statement in sql:
            schema_editor.execute(statement, params=None)

    def describe(self) -> str:
        strict = "strict " if self.strict else ""
        return f"Install locking's {strict}fence guard on {self.model_name}"

    @property
    def migration_name_fragment(self) -> str:
        strict = "strict_" if self.strict else ""
        return f"{strict}fence_guard_{self.model_name.lower()}"


def guarded_tables(connection, tables: list[str]) -> set[str]:
    """Those of ``tables`` that carry both triggers of the guard (a catalog query)."""
    if not tables:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relname = ANY(%s) AND t.tgname = ANY(%s) AND NOT t.tgisinternal "
            "GROUP BY c.relname HAVING count(DISTINCT t.tgname) = %s",
            [tables, list(TRIGGERS), len(TRIGGERS)],
        )
        return {name for (name,) in cursor.fetchall()}


def strict_tables(connection, tables: list[str]) -> set[str]:
    """Those of ``tables`` whose guard is strict (a catalog query)."""
    if not tables:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relname = ANY(%s) AND t.tgname = %s AND NOT t.tgisinternal",
            [tables, STRICT],
        )
        return {name for (name,) in cursor.fetchall()}


@contextmanager
def unfenced_writes(using: str | None = None) -> Iterator[None]:
    """Let the block write rows of strict tables that its transaction has not fenced.

    For a write that is unfenced on purpose: a fixture, a clean-up, a repair by hand.
    Runs inside ``transaction.atomic()`` (else ``TransactionManagementError``), on
    ``using`` (default ``LOCK_DATABASE``); the rest of the transaction is strict again.
    """
    connection = connections[using or setting("LOCK_DATABASE")]
    if not connection.in_atomic_block:
        raise TransactionManagementError("unfenced_writes() must run inside transaction.atomic().")
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, 'on', true)", [UNFENCED_SETTING])
    try:
        yield
    finally:
        if not connection.needs_rollback:  # else the rollback takes the setting back
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config(%s, '', true)", [UNFENCED_SETTING])


# -- a fence undone by a rolled-back savepoint ----------------------------------------------

_ROLLBACK = "ROLLBACK TO SAVEPOINT "


class _FenceMarker:
    """An ``on_commit`` callback that does nothing: it names a fenced row while its
    savepoints are alive (``connection.run_on_commit`` keeps it with their ids)."""

    __slots__ = ("row",)

    def __init__(self, row: str):
        self.row = row

    def __call__(self) -> None:
        return None


def watch(connection, table: str, pk) -> None:
    """Note that the row ``table``:``pk`` was fenced inside a savepoint. The fence calls it
    only there (``any(connection.savepoint_ids)``): a rollback of the whole transaction
    takes everything back anyway."""
    transaction.on_commit(_FenceMarker(f"{table}:{pk}"), using=connection.alias)
    if _guard_rollbacks not in connection.execute_wrappers:
        # First, not last: a caller's ``with connection.execute_wrapper(...)`` pops the
        # last wrapper when its block ends, and must pop its own.
        connection.execute_wrappers.insert(0, _guard_rollbacks)


def _guard_rollbacks(execute, sql, params, many, context):
    """Django's execute wrapper: after ``ROLLBACK TO SAVEPOINT``, guard the rows whose
    fences it undid (before Django drops their markers). Outside a transaction it has no
    savepoint to watch: it takes itself off the connection, which every later statement of a
    long-lived process would otherwise run through."""
    connection = context["connection"]
    if not connection.in_atomic_block:
        with suppress(ValueError):
            connection.execute_wrappers.remove(_guard_rollbacks)
        return execute(sql, params, many, context)
    result = execute(sql, params, many, context)
    if isinstance(sql, str) and sql.startswith(_ROLLBACK):
        savepoint = sql[len(_ROLLBACK) :].strip().strip('"')
        undone = [
            callback.row
            for savepoint_ids, callback, _robust in connection.run_on_commit
            if isinstance(callback, _FenceMarker) and savepoint in savepoint_ids
        ]
        if undone:
            # Space-separated, with spaces around each, so the guard can search " row ".
            execute(
                "SELECT set_config(%s, coalesce(current_setting(%s, true), '') || %s, true)",
                [UNDONE_SETTING, UNDONE_SETTING, " " + " ".join(undone) + " "],
                False,
                context,
            )
    return result
