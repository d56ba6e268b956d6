"""The locking app's settings, each with a default, read from ``django.conf.settings``.

A project sets only what it needs; everything here works out of the box against the
Redis of ``REDIS_URL`` and the ``default`` database.

``LOCK_REDIS_URL``            Redis for leases and counters (default: ``REDIS_URL``).
``LOCK_REDIS_MIN_REPLICAS``   replicas that must confirm a grant (``WAIT``) before it
                              counts; 0 (default) does not wait. See docs/locking.md.
``LOCK_REDIS_WAIT_TIMEOUT_MS`` how long a grant waits for those replicas (default 100).
``LOCK_DATABASE``             database alias of the durable fence epochs (default
                              ``"default"``); it must be the database of the fenced rows.
"""

from django.conf import settings

DEFAULTS = {
    "LOCK_REDIS_MIN_REPLICAS": 0,
    "LOCK_REDIS_WAIT_TIMEOUT_MS": 100,
    "LOCK_DATABASE": "default",
}


def setting(name: str):
    """Return the project's value of ``name``, else the locking app's default."""
    if name == "LOCK_REDIS_URL":
        return getattr(settings, name, None) or settings.REDIS_URL
    return getattr(settings, name, DEFAULTS[name])
