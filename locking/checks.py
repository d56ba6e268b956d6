"""System checks for lock settings."""

import warnings

from django.conf import settings
from django.core.checks import Error, Warning, register

from locking.conf import setting

# An external call should finish well within the lease, or the lease routinely expires
# mid-call and work is done twice (safely rejected by the fence, but wasted).
COMFORTABLE_SHARE_OF_TTL = 0.5


@register()
def external_timeout_below_lock_ttl(app_configs=None, **kwargs):
    """Deprecated: warn when the project's EXTERNAL_CALL_TIMEOUT_SECONDS is not comfortably
    below a lease TTL setting that LOCK_TTL_SETTINGS names.

    Both are the project's settings, so the check is the project's too (this project's is
    in ``hoa``, driven by its operation registry). Kept for one release: it runs only while
    LOCK_TTL_SETTINGS is set, and says so with a ``DeprecationWarning``.
    """
    names = setting("LOCK_TTL_SETTINGS")
    if not names:
        return []
    warnings.warn(
        "LOCK_TTL_SETTINGS and check locking.W001 are deprecated: compare your operations' "
        "lease TTLs with your external-call timeout in your own project's checks.",
        DeprecationWarning,
        stacklevel=2,
    )
    # The project's own settings, named by LOCK_TTL_SETTINGS: read by name.
    timeout = getattr(settings, "EXTERNAL_CALL_TIMEOUT_SECONDS", None)
    if timeout is None:
        return []
    messages = []
    for name in names:
        ttl = getattr(settings, name, None)
        if ttl is None:
            messages.append(
                Error(
                    f"LOCK_TTL_SETTINGS names {name}, which is not set.",
                    hint="List only the settings that hold a lease TTL in seconds.",
                    id="locking.E002",
                )
            )
            continue
        ttl = float(ttl)
        if float(timeout) > ttl * COMFORTABLE_SHARE_OF_TTL:
            messages.append(
                Warning(
                    f"EXTERNAL_CALL_TIMEOUT_SECONDS ({timeout:g}s) is not comfortably below "
                    f"{name} ({ttl:g}s).",
                    hint=(
                        "A call that runs past the lease lets a second worker start the same "
                        "work. The fence keeps the data safe, but the work is wasted: keep the "
                        f"timeout at most {COMFORTABLE_SHARE_OF_TTL:.0%} of the TTL."
                    ),
                    id="locking.W001",
                )
            )
    return messages


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
