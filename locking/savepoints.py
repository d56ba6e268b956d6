"""A fence undone by a rolled-back savepoint is caught before the transaction writes its row.

A fence protects the writes of its own transaction. Inside a nested ``atomic()`` (a
savepoint), a rollback of that savepoint takes the fence back (the row's token and the
resource's claim) while the enclosing transaction goes on, and may commit more writes to
the same row, unfenced: a holder whose lease was taken over would then write after the
newer holder. Refusing every fence inside a savepoint is not an answer: ``ATOMIC_REQUESTS``
puts every view's ``atomic()`` inside one, and a fenced step that is refused (the state
check, in its savepoint) must roll back its own writes and let the page answer.

So the rollback itself is watched, and the row is guarded for the rest of the transaction:

1. A fence that succeeds inside a savepoint registers a marker with
   ``transaction.on_commit`` (Django forgets the markers of a savepoint that rolls back, and
   all of them when the transaction ends: it is the transaction's own bookkeeping), and
   this module's execute wrapper joins the connection's (once).
2. When the wrapper sees ``ROLLBACK TO SAVEPOINT s`` pass, the markers registered while
   ``s`` was active name the fences it undid; it adds their rows to the transaction-local
   setting ``locking.undone_fences`` (``set_config(…, true)``: gone with the transaction).
3. The fence guard each fenced table carries (``InstallFenceGuard``, locking/guard.py)
   refuses an INSERT, UPDATE or DELETE of a row in that setting: the transaction fails at
   that write, before it can commit.

A transaction that does not touch the row again (the refused step's page, a batch that goes
on with other rows) commits as usual.
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
