"""The locking app's settings, each ``LOCK_``-prefixed with a default, read from
``django.conf.settings``.

Every module of the app reads its settings here, through ``setting(name)``. A project sets
only what it needs; with none of them set, locks use the Redis on 127.0.0.1:6379 and the
``default`` database.

Each setting, with its default and what it is for (made from ``DEFAULTS`` and
``DESCRIPTIONS`` below, as is the documentation site's 'Settings' page, so that neither
can drift from the code):

"""

import textwrap

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

# What each setting is for, in reStructuredText: the list at the end of this module's
# docstring and the documentation site's settings reference are both made from it (and
# from DEFAULTS). A setting without one fails the site's build (`make docs`).
DESCRIPTIONS = {
    "LOCK_REDIS_URL": (
        "Redis of leases and counters: ``redis://``, ``rediss://`` (TLS), ``unix://``, "
        "``redis+sentinel://host:port[,…]/<service>[/db]`` or "
        "``redis+cluster://host:port[,…]``. Equal to the ``LOCATION`` of a django-redis "
        "``default`` cache, it shares that cache's connection pool."
    ),
    "LOCK_REDIS_SOCKET_TIMEOUT_SECONDS": (
        "Connect and read timeout of the lock's Redis client, in seconds; past it a grant "
        "is ``LockUnavailable``."
    ),
    "LOCK_REDIS_MIN_REPLICAS": (
        "Replicas that must confirm a grant (``WAIT``) before it counts; 0 waits for none. "
        "Set it with Sentinel, or Cluster with a replica per shard, so that a failover "
        "never loses a grant in use."
    ),
    "LOCK_REDIS_WAIT_TIMEOUT_MS": (
        "How long a grant waits for those replicas, in milliseconds; a grant they did not "
        "confirm in time is released and answered ``LockUnavailable``. Keep it well below "
        "the socket timeout, which ``WAIT`` shares (check ``locking.E003``)."
    ),
    "LOCK_DATABASE": (
        "Database alias of the durable fence epochs, the audit (``FenceEvent``, its admin, "
        "``prune_fence_events``) and ``run_fenced``'s transaction checks. It must be the "
        "database of the fenced rows (check ``locking.E012``)."
    ),
    "LOCK_FENCE_EVENT_RETENTION_DAYS": "Days of audit that ``prune_fence_events`` keeps.",
    "LOCK_CLIENT_IP_CALLABLE": (
        "Dotted path of ``f(request) -> str | None``: the address a broken lease is "
        "recorded with, e.g. a proxy-aware one. ``None`` records the request's "
        "``REMOTE_ADDR``."
    ),
    "LOCK_SCOPES_CALLABLE": (
        "Dotted path of ``f(user, resources) -> ViewerScopes``: the audit scopes ``user`` "
        "may see in the admin, and the scope each resource name is in. Superusers and "
        "``manage.py locks`` see every scope; with the default, others see what was "
        "recorded without a scope."
    ),
    "LOCK_RECEIVER_SECRET": (
        "The HMAC secret a receiver of fenced calls (``fenced_receiver``, "
        "``receive_call``) verifies signatures with, unless given ``secret=``; receiving "
        "with neither is ``ImproperlyConfigured`` (check ``locking.E011``)."
    ),
}


def describe_default(name: str) -> str:
    """The default of setting ``name``, in reStructuredText."""
    if name == "LOCK_REDIS_URL":
        return f"``REDIS_URL``, else ``{DEFAULT_REDIS_URL!r}``"
    return f"``{DEFAULTS[name]!r}``"


def settings_reference() -> str:
    """Every setting with its default and what it is for, as a reStructuredText definition
    list (the end of this module's docstring)."""
    return "\n".join(
        f"``{name}`` (default {describe_default(name)})\n"
        + textwrap.indent(textwrap.fill(DESCRIPTIONS.get(name, "(undocumented)"), 84), "    ")
        + "\n"
        for name in SETTING_NAMES
    )


if __doc__ is not None:  # None under python -OO
    __doc__ += settings_reference()

_UNSET = object()

# Values read once per process: an attribute of django.conf.settings costs a few hundred
# nanoseconds, and a FenceLock reads several as it is built. Forgotten
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
