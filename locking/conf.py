"""The locking app's settings, each ``LOCK_``-prefixed with a default, read from
``django.conf.settings``.

Every module of the app reads its settings here, through ``setting(name)``. A project sets
only what it needs; with none of them set, locks use the Redis on 127.0.0.1:6379 and the
``default`` database.

=====================================  ========================================================
``LOCK_REDIS_URL``                     Redis for leases and counters; ``redis://``,
                                       ``rediss://``, ``redis+sentinel://``,
                                       ``redis+cluster://`` (default: ``REDIS_URL``, else
                                       ``redis://127.0.0.1:6379/0``).
``LOCK_REDIS_SOCKET_TIMEOUT_SECONDS``  connect and read timeout of the lock's Redis client;
                                       past it a grant is ``LockUnavailable`` (default 2.0).
``LOCK_REDIS_MIN_REPLICAS``            replicas that must confirm a grant (``WAIT``) before
                                       it counts; 0 does not wait (default 0). See
                                       docs/locking/epochs.md.
``LOCK_REDIS_WAIT_TIMEOUT_MS``         how long a grant waits for those replicas (default
                                       100).
``LOCK_DATABASE``                      database alias of the durable fence epochs, the audit
                                       and ``run_fenced``'s transaction checks (default
                                       ``"default"``); it must be the database of the
                                       fenced rows.
``LOCK_FENCE_EVENT_RETENTION_DAYS``    days of audit that ``prune_fence_events`` keeps
                                       (default 90).
``LOCK_CLIENT_IP_CALLABLE``            dotted path of ``f(request) -> str | None``: the
                                       address a broken lease is recorded with (default:
                                       the request's ``REMOTE_ADDR``).
``LOCK_SCOPES_CALLABLE``               dotted path of ``f(user, resources) ->
                                       ViewerScopes``: the audit scopes ``user`` may see
                                       in the admin and the scope each resource name is
                                       in; superusers and ``manage.py locks`` see all
                                       (default ``"locking.operators.recorded_scopes"``:
                                       others see what was recorded without a scope).
``LOCK_RECEIVER_SECRET``               the HMAC secret a receiver of fenced calls
                                       (``fenced_receiver``, ``receive_call``) verifies
                                       signatures with, unless given one (default ``""``:
                                       receiving without one is ``ImproperlyConfigured``).
=====================================  ========================================================
"""

from django.conf import settings
from django.core.signals import setting_changed

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

DEFAULTS = {
    "LOCK_REDIS_SOCKET_TIMEOUT_SECONDS": 2.0,
    "LOCK_REDIS_MIN_REPLICAS": 0,
    "LOCK_REDIS_WAIT_TIMEOUT_MS": 100,
    "LOCK_DATABASE": "default",
    "LOCK_FENCE_EVENT_RETENTION_DAYS": 90,
    "LOCK_CLIENT_IP_CALLABLE": None,
    "LOCK_SCOPES_CALLABLE": "locking.operators.recorded_scopes",
    "LOCK_RECEIVER_SECRET": "",
}

# Every setting locking reads (check locking.W002 warns about any other LOCK_ name).
SETTING_NAMES = ("LOCK_REDIS_URL", *DEFAULTS)

_UNSET = object()

# Values read once per process: an attribute of django.conf.settings costs a few hundred
# nanoseconds, and run_fenced builds a FenceLock (several reads) per operation. Forgotten
# whenever a setting changes: the ``setting_changed`` signal, or a new settings holder
# (``override_settings`` makes one each time, even when it only deletes a name, which
# sends no signal: pytest-django's ``del settings.X``).
_CACHE: dict[str, object] = {}
_read_from: list = [None]  # the settings holder the cache was read from


def setting(name: str):
    """Return the project's value of ``name``, else the locking app's default."""
    if settings._wrapped is not _read_from[0]:  # override_settings made a new holder
        forget_settings()
        _read_from[0] = settings._wrapped
    try:
        return _CACHE[name]
    except KeyError:
        pass
    if name == "LOCK_REDIS_URL":
        value = (
            getattr(settings, "LOCK_REDIS_URL", None)
            or getattr(settings, "REDIS_URL", None)
            or DEFAULT_REDIS_URL
        )
        _CACHE[name] = value
        return value
    value = getattr(settings, name, _UNSET)
    if value is not _UNSET:
        _CACHE[name] = value
        return value
    value = _CACHE[name] = DEFAULTS[name]
    return value


def forget_settings(**_) -> None:
    """Read every setting again at its next use (connected to ``setting_changed``)."""
    _CACHE.clear()
    for forget in _ON_CHANGE:
        forget()


# What else derives from settings and must be derived again (locking/connection.py's client).
_ON_CHANGE: list = []

setting_changed.connect(forget_settings, dispatch_uid="locking.conf.forget_settings")
