"""System checks of the fenced tables themselves, against the database they live in: a
fenced model whose migrations install the fence guard (``locking.E013``), a migrated
table whose guard's triggers are there and enabled, strict where its migrations made it so
(``locking.E014``), and fenced rows
whose ``last_fence_token`` is within what a fence record could have granted
(``locking.E016``). Registered when ``locking.checks`` (which lists every id) imports them.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.core.checks import Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import router

from locking.conf import setting
from locking.documentation import see

FENCE_FIELD = "last_fence_token"
# Where the hints send a reader (the wheel ships no page: its title and its URL).
SEE_GUARD = see("The fence check", "fence", "The fence guard: a column that never goes backwards")
SEE_ROW_BEYOND = see("Epochs: when Redis loses the counter", "epochs", "A row beyond its record")

# True while locking's ``makemigrations`` runs its checks: the command that writes the
# guard's migration must not be stopped by the error that asks for it.
_writing_migrations: ContextVar[bool] = ContextVar("locking_writing_migrations", default=False)


@contextmanager
def writing_migrations() -> Iterator[None]:
    """While this runs, ``locking.E013`` is reported as the warning ``locking.W013``."""
    reset = _writing_migrations.set(True)
    try:
        yield
    finally:
        _writing_migrations.reset(reset)


def fenced_models() -> list:
    """Every concrete model whose table holds a ``last_fence_token`` column of its own."""
    from django.apps import apps

    return [
        model
        for model in apps.get_models()
        if not model._meta.proxy
        and model._meta.managed
        and any(field.name == "last_fence_token" for field in model._meta.local_concrete_fields)
    ]


def _guard_operations() -> dict[tuple[str, str], list[tuple[tuple[str, str], bool]]]:
    """``(app_label, model_name)`` -> each migration that installs its fence guard, with
    whether that one makes it strict, in the order of their names."""
    from django.db.migrations.loader import MigrationLoader

    from locking.guard import InstallFenceGuard

    loader = MigrationLoader(None, ignore_no_migrations=True)
    found: dict[tuple[str, str], list[tuple[tuple[str, str], bool]]] = {}
    for key, migration in sorted(loader.disk_migrations.items()):
        for operation in migration.operations:
            if isinstance(operation, InstallFenceGuard):
                model = (key[0], operation.model_name.lower())
                found.setdefault(model, []).append((key, operation.strict))
    return found


def _guarding_migrations() -> dict[tuple[str, str], tuple[str, str]]:
    """``(app_label, model_name)`` -> the (first) migration that installs its fence guard."""
    return {model: operations[0][0] for model, operations in _guard_operations().items()}


def _strict_migrations(applied) -> dict[tuple[str, str], tuple[str, str]]:
    """``(app_label, model_name)`` -> the migration that made its guard strict, for the
    models whose last applied guard operation is strict."""
    strict = {}
    for model, operations in _guard_operations().items():
        done = [(key, is_strict) for key, is_strict in operations if key in applied]
        if done and done[-1][1]:
            strict[model] = done[-1][0]
    return strict


@register()
def fenced_models_install_the_guard(app_configs=None, **kwargs):
    """Every fenced model's migrations install the fence guard (locking/guard.py): without
    it, a save() of an instance built by pk, a bulk_update or a fixture can move the fence
    backwards, and a fence undone by a savepoint goes unnoticed."""
    models = [
        model
        for model in fenced_models()
        if app_configs is None or model._meta.app_config in app_configs
    ]
    if not models:
        return []
    guarded = _guarding_migrations()
    unguarded = [
        model for model in models if (model._meta.app_label, model._meta.model_name) not in guarded
    ]
    if _writing_migrations.get():
        # makemigrations (locking/management/commands/makemigrations.py) writes the
        # migration that fixes E013: there it is a warning, so ``makemigrations --empty``
        # runs instead of stopping at the error that asks for it.
        return [
            CheckWarning(*_unguarded_message(model), obj=model, id="locking.W013")
            for model in unguarded
        ]
    return [Error(*_unguarded_message(model), obj=model, id="locking.E013") for model in unguarded]


def _unguarded_message(model) -> tuple[str, str]:
    """E013's (and W013's) message and hint for ``model``."""
    opts = model._meta
    return (
        f"{opts.label} carries a fence (last_fence_token), but no migration of "
        f"{opts.app_label} installs locking's fence guard on its table.",
        f"Run manage.py makemigrations --empty {opts.app_label}, and put operations = "
        f"[InstallFenceGuard({opts.model_name!r})] (from locking import InstallFenceGuard) in "
        f"the migration it writes. See {SEE_GUARD}.",
    )


def reinstall_command(migration: tuple[str, str], alias: str) -> str:
    """E014's hint: migrate the app back before the guard's ``migration`` and forward
    again. ``--skip-checks`` on the way back: ``migrate`` runs the database checks first,
    and E014 itself would stop it."""
    from django.db.migrations.loader import MigrationLoader

    app_label = migration[0]
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    before = sorted(key[1] for key in graph.node_map[migration].parents if key[0] == app_label)
    target = before[-1] if before else "zero"
    database = "" if alias == "default" else f" --database {alias}"
    return (
        f"Run manage.py migrate {app_label} {target} --skip-checks{database} && manage.py "
        f"migrate {app_label}{database} (it unapplies the migrations of {app_label} after "
        f"{target} too, and applies them again)."
    )


# The guard's triggers on ``tables`` that do not fire in an ordinary session: disabled
# (``tgenabled = 'D'``: ALTER TABLE … DISABLE TRIGGER, as bulk loads and ``pg_restore
# --disable-triggers`` leave them) or firing only in replica sessions (``'R'``).
_SLEEPING_TRIGGERS_SQL = """
SELECT c.relname, t.tgname, t.tgenabled FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relname = ANY(%s) AND t.tgname = ANY(%s) AND NOT t.tgisinternal
    AND t.tgenabled NOT IN ('O', 'A')
ORDER BY c.relname, t.tgname
"""


def sleeping_guard_triggers(connection, tables: list[str]) -> dict[str, list[str]]:
    """The guard's triggers that do not fire in an ordinary session, by table."""
    from locking.guard import STRICT, TRIGGERS

    if not tables:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_SLEEPING_TRIGGERS_SQL, [tables, [*TRIGGERS, STRICT]])
        sleeping: dict[str, list[str]] = {}
        for table, trigger, _state in cursor.fetchall():
            sleeping.setdefault(table, []).append(trigger)
    return sleeping


def enable_triggers_sql(table: str, triggers: list[str], quote) -> str:
    """The statement that makes ``triggers`` of ``table`` fire again (in every session
    that is not a replica's, as installed)."""
    actions = ", ".join(f"ENABLE TRIGGER {quote(trigger)}" for trigger in triggers)
    return f"ALTER TABLE {quote(table)} {actions};"


@register(Tags.database)
def fenced_tables_carry_the_guard(app_configs=None, databases=None, **kwargs):
    """A fenced table whose guard migration is applied carries the guard's triggers
    (someone may have dropped them, or faked the migration), and they are enabled (a bulk
    load or ``pg_restore --disable-triggers`` may have left them disabled, and a disabled
    guard keeps nothing from going back). Until that migration is applied, ``migrate`` is
    what installs them: nothing to report."""
    from django.db import connections
    from django.db.migrations.recorder import MigrationRecorder

    errors = []
    for alias in databases or ():
        connection = connections[alias]
        applied = MigrationRecorder(connection).applied_migrations()
        guarded, missing = _guard_state(connection, alias, applied)
        errors += missing
        errors += _not_strict(connection, alias, applied, guarded)
        errors += _sleeping(connection, alias, guarded)
    return errors


def _guard_state(connection, alias: str, applied) -> tuple[set[str], list[Error]]:
    """The tables whose guard migration is applied that carry the guard, and an error for
    each that does not."""
    from locking.guard import guarded_tables

    guarding = _guarding_migrations()
    migration_of = {
        model._meta.db_table: guarding[(model._meta.app_label, model._meta.model_name)]
        for model in fenced_models()
        if router.allow_migrate_model(alias, model)
        and guarding.get((model._meta.app_label, model._meta.model_name)) in applied
    }
    guarded = guarded_tables(connection, list(migration_of))
    return guarded, [
        Error(
            f"Table {table} of a fenced model lacks locking's fence guard in "
            f"database {alias!r}, although the migration that installs it "
            f"({'.'.join(migration)}) is applied.",
            hint=reinstall_command(migration, alias),
            id="locking.E014",
        )
        for table, migration in migration_of.items()
        if table not in guarded
    ]


def _not_strict(connection, alias: str, applied, guarded: set[str]) -> list[Error]:
    """An error for each guarded table its applied migrations made strict that is not."""
    from locking.guard import strict_tables

    made_strict = _strict_migrations(applied)
    strict_by = {
        model._meta.db_table: made_strict[(model._meta.app_label, model._meta.model_name)]
        for model in fenced_models()
        if model._meta.db_table in guarded
        and (model._meta.app_label, model._meta.model_name) in made_strict
    }
    strict = strict_tables(connection, list(strict_by))
    return [
        Error(
            f"The fence guard on table {table} is not strict in database {alias!r}, "
            f"although the migration that makes it strict ({'.'.join(migration)}) is "
            "applied: a write of a row its transaction has not fenced goes through.",
            hint=reinstall_command(migration, alias),
            id="locking.E014",
        )
        for table, migration in strict_by.items()
        if table not in strict
    ]


def _sleeping(connection, alias: str, guarded: set[str]) -> list[Error]:
    """An error for each guarded table whose triggers are disabled."""
    quote = connection.ops.quote_name
    return [
        Error(
            f"The fence guard on table {table} is installed but not enabled in database "
            f"{alias!r} (trigger {', '.join(triggers)}; ALTER TABLE … DISABLE TRIGGER, as "
            "bulk loads and pg_restore --disable-triggers leave it): a write can move "
            "last_fence_token backwards.",
            hint=(
                f"Enable it (manage.py dbshell --database {alias}): "
                f"{enable_triggers_sql(table, triggers, quote)}"
            ),
            id="locking.E014",
        )
        for table, triggers in sleeping_guard_triggers(connection, list(guarded)).items()
    ]


@register(Tags.database)
def fenced_rows_are_within_their_records(app_configs=None, databases=None, **kwargs):
    """No fenced row records a token of an epoch no fence record ever began: such a row
    was written by hand or by an old fixture (``update(last_fence_token=2**62)``), and
    every grant of its resource is refused until it is repaired. The bound is the highest
    epoch of any record (a row's resource is the project's to know, not locking's): a row
    past it is corrupt whatever its resource; ``run_fenced`` holds each resource to its
    own record (``FenceBeyondRecord``)."""
    from django.db import connections

    from locking.epochs import first_token

    errors = []
    for alias in databases or ():
        if alias != setting("LOCK_DATABASE"):
            continue  # the records, and the fenced rows (E012), are in LOCK_DATABASE
        connection = connections[alias]
        present = set(connection.introspection.table_names())
        if "locking_fenceepoch" not in present:
            continue  # not migrated yet: no grant has been recorded
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute("SELECT COALESCE(MAX(epoch), 0) FROM locking_fenceepoch")
            (newest_epoch,) = cursor.fetchone()
            bound = first_token(int(newest_epoch) + 1)
            for model in fenced_models():
                opts = model._meta
                if opts.db_table not in present or not router.allow_migrate_model(alias, model):
                    continue
                column = quote(opts.get_field(FENCE_FIELD).column)
                cursor.execute(
                    f"SELECT {quote(opts.pk.column)}, {column} FROM {quote(opts.db_table)} "  # noqa: S608
                    f"WHERE {column} >= %s ORDER BY {column} DESC LIMIT %s",
                    [bound, ROWS_NAMED],
                )
                errors += [
                    Error(
                        f"{opts.label} pk {pk} records fence token {token} in database "
                        f"{alias!r}: beyond every epoch a fence record began (the newest is "
                        f"{newest_epoch}, whose last token is {bound - 1}). No grant gave it: "
                        "a write by hand or an old fixture. Every attempt on its resource is "
                        "refused (FenceBeyondRecord) until it is repaired.",
                        hint=(
                            f"manage.py locks repair RESOURCE --model {opts.label} --pk {pk} "
                            f'--token {token} --reason "…" (RESOURCE: the resource whose '
                            f"operation fences this row). See {SEE_ROW_BEYOND}."
                        ),
                        obj=model,
                        id="locking.E016",
                    )
                    for pk, token in cursor.fetchall()
                ]
    return errors


# How many rows of one table E016 names at most (the highest tokens first).
ROWS_NAMED = 5
