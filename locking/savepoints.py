"""A fence undone by a rolled-back savepoint is caught before the transaction writes its row.

A fence inside a savepoint registers an on-commit marker (Django drops it with a savepoint
that rolls back); this module's execute wrapper, seeing ``ROLLBACK TO SAVEPOINT s``, puts the
rows whose fences ``s`` undid in the transaction-local setting ``locking.undone_fences``, and
the fence guard's trigger refuses any later write of them. Why a savepoint's fence is not
simply refused: the documentation's 'The fence check' page.
"""

from django.db import transaction

UNDONE_SETTING = "locking.undone_fences"
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
    """Note that the row ``table``:``pk`` was fenced; only inside a savepoint does it cost
    anything (a rollback of the whole transaction takes everything back anyway)."""
    if not any(connection.savepoint_ids):
        return
    transaction.on_commit(_FenceMarker(f"{table}:{pk}"), using=connection.alias)
    if _guard_rollbacks not in connection.execute_wrappers:
        # First, not last: a caller's ``with connection.execute_wrapper(...)`` pops the
        # last wrapper when its block ends, and must pop its own.
        connection.execute_wrappers.insert(0, _guard_rollbacks)


def _guard_rollbacks(execute, sql, params, many, context):
    """Django's execute wrapper: after ``ROLLBACK TO SAVEPOINT``, guard the rows whose
    fences it undid (before Django drops their markers)."""
    result = execute(sql, params, many, context)
    if isinstance(sql, str) and sql.startswith(_ROLLBACK):
        connection = context["connection"]
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
