"""The locking app's settings, each with a default, read from ``django.conf.settings``.

Every module of the app reads its settings here, through ``setting(name)``. A project sets
only what it needs; with none of them set, locks use the Redis on 127.0.0.1:6379 and the
``default`` database.

==================================  ===========================================================
``LOCK_REDIS_URL``                  Redis for leases and counters; ``redis://``, ``rediss://``,
                                    ``redis+sentinel://``, ``redis+cluster://`` (default:
                                    ``REDIS_URL``, else ``redis://127.0.0.1:6379/0``).
``REDIS_SOCKET_TIMEOUT_SECONDS``    connect and read timeout of the lock's Redis client; past
                                    it a grant is ``LockUnavailable`` (default 2.0).
``LOCK_REDIS_MIN_REPLICAS``         replicas that must confirm a grant (``WAIT``) before it
                                    counts; 0 does not wait (default 0). See docs/locking.md.
``LOCK_REDIS_WAIT_TIMEOUT_MS``      how long a grant waits for those replicas (default 100).
``LOCK_DATABASE``                   database alias of the durable fence epochs (default
                                    ``"default"``); it must be the database of the fenced rows.
``LOCK_TTL_SETTINGS``               names of the project's lease TTL settings (seconds) that
                                    check ``locking.W001`` compares with
                                    ``EXTERNAL_CALL_TIMEOUT_SECONDS`` (default: none).
``EXTERNAL_CALL_TIMEOUT_SECONDS``   the project's timeout of external calls made under a lease
                                    (default ``None``: check ``locking.W001`` is off).
``FENCE_EVENT_RETENTION_DAYS``      days of audit that ``prune_fence_events`` keeps (default 90).
==================================  ===========================================================
"""

from django.conf import settings

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

DEFAULTS = {
    "REDIS_SOCKET_TIMEOUT_SECONDS": 2.0,
    "LOCK_REDIS_MIN_REPLICAS": 0,
    "LOCK_REDIS_WAIT_TIMEOUT_MS": 100,
    "LOCK_DATABASE": "default",
    "LOCK_TTL_SETTINGS": (),
    "EXTERNAL_CALL_TIMEOUT_SECONDS": None,
    "FENCE_EVENT_RETENTION_DAYS": 90,
}


def setting(name: str):
    """Return the project's value of ``name``, else the locking app's default."""
    if name == "LOCK_REDIS_URL":
        return (
            getattr(settings, "LOCK_REDIS_URL", None)
            or getattr(settings, "REDIS_URL", None)
            or DEFAULT_REDIS_URL
        )
    return getattr(settings, name, DEFAULTS[name])
