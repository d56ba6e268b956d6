"""Is the database ready for this code? Shared by ``/readyz`` and the management commands."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor

# Once every migration is applied it stays applied for this process's code: checking the
# graph again on every probe would read every migration file each time.
_migrations_applied = False


def pending_migrations() -> int:
    """How many migrations of this code the database has not applied yet."""
    global _migrations_applied
    if _migrations_applied:
        return 0
    executor = MigrationExecutor(connection)
    pending = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
    _migrations_applied = pending == 0
    return pending
