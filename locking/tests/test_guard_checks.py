"""The fence guard's system checks: a fenced model whose migrations never install the guard
(``locking.E013``), and a migrated table that lost its triggers or has them disabled
(``locking.E014``)."""

import re
import shlex
from io import StringIO

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from locking.checks import fenced_tables_carry_the_guard
from locking.guard import TRIGGERS, guarded_tables, install_sql, uninstall_sql
from locking.tests.testapp.models import FencedThing

TABLE = FencedThing._meta.db_table


def ids(messages) -> list[str]:
    return sorted(message.id for message in messages if message.id.startswith("locking.E01"))


def test_every_fenced_model_of_these_settings_installs_the_guard():
    assert ids(checks.run_checks()) == []


def test_a_fenced_model_whose_migrations_never_install_the_guard_is_an_error(monkeypatch):
    from locking import checks as locking_checks
    from locking import fenced_checks

    monkeypatch.setattr(fenced_checks, "_guarding_migrations", dict)  # no InstallFenceGuard
    messages = locking_checks.fenced_models_install_the_guard()
    assert "locking.E013" in ids(messages)
    [thing] = [m for m in messages if m.obj is FencedThing]
    assert "InstallFenceGuard('fencedthing')" in thing.hint
    assert "makemigrations --empty locking_testapp" in thing.hint


@pytest.mark.django_db
def test_makemigrations_runs_for_a_fenced_model_without_its_guard_and_check_and_migrate_refuse(
    monkeypatch,
):
    """Issue 45, item 1: Django runs the system checks before ``makemigrations``, and E013
    stopped the command that writes the guard's migration (``makemigrations --empty``).
    There it is the warning W013; ``check`` and ``migrate`` still stop at E013."""
    from locking import fenced_checks

    monkeypatch.setattr(fenced_checks, "_guarding_migrations", dict)  # no InstallFenceGuard
    out, err = StringIO(), StringIO()
    call_command(
        "makemigrations",
        "locking_testapp",
        "--empty",
        "--dry-run",
        skip_checks=False,
        stdout=out,
        stderr=err,
    )  # call_command skips the checks unless told: manage.py runs them
    assert "locking.W013" in err.getvalue() and "locking.E013" not in err.getvalue()
    assert "locking_testapp" in out.getvalue()  # the empty migration it would write
    with pytest.raises(SystemCheckError, match=r"locking\.E013"):
        call_command("check", stdout=StringIO(), stderr=StringIO())
    with pytest.raises(SystemCheckError, match=r"locking\.E013"):
        call_command("migrate", "--plan", skip_checks=False, stdout=StringIO())


@pytest.mark.django_db(transaction=True)
def test_a_migrated_table_without_its_triggers_is_an_error_until_they_are_back():
    assert TABLE in guarded_tables(connection, [TABLE])
    assert fenced_tables_carry_the_guard(databases=["default"]) == []
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for statement in uninstall_sql(TABLE, quote):
            cursor.execute(statement)
    try:
        assert TABLE not in guarded_tables(connection, [TABLE])
        [error] = [
            m for m in fenced_tables_carry_the_guard(databases=["default"]) if TABLE in m.msg
        ]
        assert error.id == "locking.E014"
    finally:
        with connection.cursor() as cursor:
            for statement in install_sql(TABLE, "last_fence_token", "id", quote):
                cursor.execute(statement)
    assert fenced_tables_carry_the_guard(databases=["default"]) == []


@pytest.mark.django_db(transaction=True)
def test_a_guard_whose_triggers_are_disabled_is_an_error_whose_hint_enables_them():
    """Issue 44, item 4: E014 read only whether the triggers existed. After ``ALTER TABLE …
    DISABLE TRIGGER USER`` (a bulk load, ``pg_restore --disable-triggers``) it passed, and
    a write moved a fenced column from 7 to 0."""
    thing = FencedThing.objects.create(name="fenced", last_fence_token=7)
    quoted = connection.ops.quote_name(TABLE)
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {quoted} DISABLE TRIGGER USER")
    try:
        [error] = [
            m for m in fenced_tables_carry_the_guard(databases=["default"]) if TABLE in m.msg
        ]
        assert error.id == "locking.E014"
        assert "not enabled" in error.msg and "locking_fence_never_back" in error.msg
        FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=0)  # why it matters
        assert FencedThing.objects.get(pk=thing.pk).last_fence_token == 0

        enable = error.hint.split(": ", 1)[1]  # the hint's command, run as it is written
        never_back, undone = (connection.ops.quote_name(name) for name in TRIGGERS)
        assert enable == (
            f"ALTER TABLE {quoted} ENABLE TRIGGER {never_back}, ENABLE TRIGGER {undone};"
        )
        with connection.cursor() as cursor:
            cursor.execute(enable)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {quoted} ENABLE TRIGGER USER")
    assert fenced_tables_carry_the_guard(databases=["default"]) == []
    FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=7)
    FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=0)
    assert FencedThing.objects.get(pk=thing.pk).last_fence_token == 7  # the guard holds again


@pytest.mark.django_db(transaction=True)
def test_the_hint_of_a_guard_whose_triggers_are_gone_is_commands_that_put_them_back():
    """Issue 45, item 1: the hint said "migrate its app back before that migration and
    forward again", and that backward ``migrate`` stopped at E014 itself (``migrate``
    runs the database checks first). The hint's commands, run as written, bring the
    guard back."""
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for statement in uninstall_sql(TABLE, quote):
            cursor.execute(statement)
    try:
        [error] = [
            m for m in fenced_tables_carry_the_guard(databases=["default"]) if TABLE in m.msg
        ]
        commands = re.findall(r"manage\.py (migrate [^&(]+)", error.hint)
        assert commands == [
            "migrate locking_testapp 0001_initial --skip-checks ",
            "migrate locking_testapp ",
        ]
        back = shlex.split(commands[0])
        with pytest.raises(SystemCheckError, match=r"locking\.E014"):  # without --skip-checks
            call_command(*back[:-1], skip_checks=False, stdout=StringIO())
        for command in commands:
            args = shlex.split(command)  # as manage.py runs them: checks unless --skip-checks
            options = {} if "--skip-checks" in args else {"skip_checks": False}
            call_command(*args, **options, stdout=StringIO())
        assert TABLE in guarded_tables(connection, [TABLE])
    finally:
        with connection.cursor() as cursor:
            for statement in install_sql(TABLE, "last_fence_token", "id", quote):
                cursor.execute(statement)
    assert fenced_tables_carry_the_guard(databases=["default"]) == []
