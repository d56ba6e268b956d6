"""System checks for lock settings."""

from django.core.checks import Error, register

from locking.conf import setting


@register()
def replica_wait_below_the_socket_timeout(app_configs=None, **kwargs):
    """With LOCK_REDIS_MIN_REPLICAS, refuse a LOCK_REDIS_WAIT_TIMEOUT_MS that is not below
    the lock client's socket timeout: the grant's reply waits for WAIT on one connection,
    so every grant the replicas are slow to confirm would end as a timed-out connection
    (and a skipped token) instead of a refused, released grant.

    (It replaces ``locking.E001``, which refused replicas with Redis Cluster: the grant now
    runs its ``WAIT`` on the slot owner's own connection, so Cluster is covered too.)
    """
    if not int(setting("LOCK_REDIS_MIN_REPLICAS")):
        return []
    wait_ms = int(setting("LOCK_REDIS_WAIT_TIMEOUT_MS"))
    socket_seconds = float(setting("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS"))
    if wait_ms < socket_seconds * 1000:
        return []
    return [
        Error(
            f"LOCK_REDIS_WAIT_TIMEOUT_MS ({wait_ms}) is not below the lock's socket timeout "
            f"LOCK_REDIS_SOCKET_TIMEOUT_SECONDS ({socket_seconds:g}s).",
            hint="WAIT shares the grant's connection: keep it well below the socket timeout "
            "(docs/locking.md, Replicas).",
            id="locking.E003",
        )
    ]
