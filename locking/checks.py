"""System checks: locking's misconfigurations reported by ``manage.py check`` (and at every
start of ``runserver``, ``migrate``, ...), with ids and hints, instead of at the first grant
or the first request.

=================  ===========================================================================
``locking.E003``   with ``LOCK_REDIS_MIN_REPLICAS``, a ``LOCK_REDIS_WAIT_TIMEOUT_MS`` not below
                   the socket timeout
``locking.E004``   ``LOCK_DATABASE`` is not an alias of ``DATABASES``
``locking.E005``   ``LOCK_DATABASE`` is not PostgreSQL
``locking.E006``   ``LOCK_REDIS_URL`` has a scheme locking cannot use
``locking.E007``   ``LOCK_REDIS_URL`` does not parse
``locking.E008``   a timeout or retention that is not a positive number
``locking.E009``   ``LOCK_REDIS_MIN_REPLICAS`` is not a whole number of at least 0
``locking.E010``   ``LOCK_CLIENT_IP_CALLABLE`` does not import, or is not callable
``locking.E011``   a ``fenced_receiver`` view in the URLconf with no secret to verify with
``locking.E012``   a fenced model that the database routers send away from ``LOCK_DATABASE``
``locking.E013``   a fenced model whose migrations never install the fence guard
``locking.W013``   E013 while ``makemigrations`` runs (it writes the migration that fixes it)
``locking.E014``   (a database check) a fenced table whose guard migration is applied but whose
                   triggers are gone or disabled, or that its migrations made strict and
                   is not
``locking.E015``   ``LOCK_SCOPES_CALLABLE`` does not import, or is not callable
``locking.E016``   (a database check) a fenced row whose ``last_fence_token`` is beyond every
                   epoch a fence record began (a write by hand, an old fixture)
``locking.W002``   a ``LOCK_`` setting that locking does not know (a misspelling?)
=================  ===========================================================================

``locking.E001``, ``E002`` and ``W001`` were retired and are not reused.
"""

import difflib
import math
from urllib.parse import urlsplit

import redis.connection
from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured
from django.db import router
from django.db.utils import load_backend
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils.module_loading import import_string

from locking.conf import DEFAULTS, SETTING_NAMES, setting
from locking.connection import _hosts
from locking.documentation import see
from locking.fenced_checks import (  # noqa: F401 - registers E013, E014 and E016
    FENCE_FIELD,
    fenced_models,
    fenced_models_install_the_guard,
    fenced_rows_are_within_their_records,
    fenced_tables_carry_the_guard,
)

# What locking/connection.py builds a client for: redis-py's own schemes and locking's two.
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "redis+cluster")
# Settings that must be positive numbers, and whether they must be whole ones.
POSITIVE_NUMBERS = {
    "LOCK_REDIS_SOCKET_TIMEOUT_SECONDS": False,
    "LOCK_REDIS_WAIT_TIMEOUT_MS": True,
    "LOCK_FENCE_EVENT_RETENTION_DAYS": True,
}
# Where the hints send a reader (the wheel ships no page: its title and its URL).
SEE_SETTINGS = see("Settings", "settings")
SEE_REPLICAS = see(
    "Epochs: when Redis loses the counter", "epochs", "Replicas: LOCK_REDIS_MIN_REPLICAS"
)


def is_number(value: object, *, whole: bool = False) -> bool:
    """A finite int or float (not a bool, not a string of digits); ``whole``: an int."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) if whole else math.isfinite(value)


@register()
def replica_wait_below_the_socket_timeout(app_configs=None, **kwargs):
    """With LOCK_REDIS_MIN_REPLICAS, refuse a LOCK_REDIS_WAIT_TIMEOUT_MS that is not below
    the lock client's socket timeout: the grant's reply waits for WAIT on one connection,
    so every grant the replicas are slow to confirm would end as a timed-out connection
    (and a skipped token) instead of a refused, released grant.

    (It replaces ``locking.E001``, which refused replicas with Redis Cluster: the grant now
    runs its ``WAIT`` on the slot owner's own connection, so Cluster is covered too.)
    Values that are not numbers are E008's and E009's to report.
    """
    replicas = setting("LOCK_REDIS_MIN_REPLICAS")
    wait_ms = setting("LOCK_REDIS_WAIT_TIMEOUT_MS")
    socket_seconds = setting("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS")
    if not all(is_number(value) for value in (replicas, wait_ms, socket_seconds)):
        return []
    if not replicas or wait_ms < socket_seconds * 1000:
        return []
    return [
        Error(
            f"LOCK_REDIS_WAIT_TIMEOUT_MS ({wait_ms}) is not below the lock's socket timeout "
            f"LOCK_REDIS_SOCKET_TIMEOUT_SECONDS ({socket_seconds:g}s).",
            hint="WAIT shares the grant's connection: keep it well below the socket timeout. "
            f"See {SEE_REPLICAS}.",
            id="locking.E003",
        )
    ]


@register()
def lock_database_is_postgresql(app_configs=None, **kwargs):
    """``LOCK_DATABASE`` names a database of ``DATABASES``, and a PostgreSQL one: the fence
    check and the epochs are PostgreSQL SQL (with SQLite, ``migrate`` works and the first
    grant fails with ``no such function: now``). Known without connecting, so reported by
    every ``check``, not only ``check --database``."""
    alias = setting("LOCK_DATABASE")
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        return [
            Error(
                f"LOCK_DATABASE is {alias!r}, which is not a database of DATABASES "
                f"({', '.join(map(repr, settings.DATABASES))}).",
                hint="Set LOCK_DATABASE to the alias of the PostgreSQL database that holds "
                "the fenced rows (default: 'default').",
                id="locking.E004",
            )
        ]
    engine = settings.DATABASES[alias].get("ENGINE") or "django.db.backends.dummy"
    try:
        vendor = load_backend(engine).DatabaseWrapper.vendor  # the backend's own answer
    except ImproperlyConfigured:  # a backend that does not import: Django's checks say so
        vendor = f"{engine} (which does not import)"
    if vendor == "postgresql":
        return []
    return [
        Error(
            f"LOCK_DATABASE {alias!r} is {vendor}, not PostgreSQL.",
            hint="The fence check, the epochs and the receiver's record are PostgreSQL SQL: "
            "point LOCK_DATABASE at a PostgreSQL database (django.db.backends.postgresql, "
            "or a backend built on it).",
            id="locking.E005",
        )
    ]


@register()
def redis_url_is_usable(app_configs=None, **kwargs):
    """``LOCK_REDIS_URL`` (else ``REDIS_URL``) parses, with a scheme locking can use."""
    name = "LOCK_REDIS_URL" if getattr(settings, "LOCK_REDIS_URL", None) else "REDIS_URL"
    url = setting("LOCK_REDIS_URL")
    hint = (
        "A Redis URL: redis://host:port/db, rediss://… (TLS), unix:///path.sock, "
        "redis+sentinel://host:port[,host:port…]/<service>[/db] or "
        f"redis+cluster://host:port[,host:port…]. See {SEE_SETTINGS}."
    )
    if not isinstance(url, str):
        return [Error(f"{name} is not a string: {url!r}.", hint=hint, id="locking.E007")]
    try:
        parts = urlsplit(url)
    except ValueError as error:
        return [Error(f"{name} does not parse: {error}.", hint=hint, id="locking.E007")]
    if not parts.scheme:
        return [Error(f"{name} has no scheme.", hint=hint, id="locking.E007")]
    if parts.scheme not in REDIS_SCHEMES:
        # The URL may carry a password: the message names the scheme only.
        close = difflib.get_close_matches(parts.scheme, REDIS_SCHEMES, n=1)
        did_you_mean = f" Did you mean {close[0]}://?" if close else ""
        return [
            Error(
                f"{name} has the scheme {parts.scheme}://, which locking cannot use."
                + did_you_mean,
                hint=hint,
                id="locking.E006",
            )
        ]
    problem = _redis_url_problem(parts, url)
    if problem is None:
        return []
    return [Error(f"{name} does not parse: {problem}.", hint=hint, id="locking.E007")]


def _redis_url_problem(parts, url: str) -> str | None:
    """What is wrong with a URL of a known scheme, as locking/connection.py reads it."""
    if parts.scheme in ("redis+sentinel", "redis+cluster"):
        try:
            _hosts(parts.netloc, 0)
        except ValueError:
            return "a host's port is not a number"
        path = [segment for segment in parts.path.split("/") if segment]
        if parts.scheme == "redis+cluster":
            return "Redis Cluster has no database number" if path else None
        if not path:
            return "a Sentinel URL needs the service name: …/<service_name>[/db]"
        if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
            return "after the service name only a database number may follow"
        return None
    try:
        redis.connection.parse_url(url)
    except ValueError as error:
        return str(error).rstrip(".")
    if parts.scheme == "unix":
        return None if parts.path else "a unix:// URL needs the socket's path"
    database = parts.path.strip("/")
    if database and not database.isdigit():  # redis-py would quietly use database 0
        return f"the database {database!r} is not a number"
    return None


@register()
def numbers_are_positive(app_configs=None, **kwargs):
    """Timeouts and the retention are positive numbers; replicas a whole number >= 0."""
    errors = []
    for name, whole in POSITIVE_NUMBERS.items():
        value = setting(name)
        if not (is_number(value, whole=whole) and value > 0):
            kind = "a whole number" if whole else "a number"
            errors.append(
                Error(
                    f"{name} must be {kind} greater than 0, not {value!r}.",
                    hint=f"Write it as a Python {'int' if whole else 'int or float'}, not a "
                    f"string (default: {DEFAULTS[name]!r}).",
                    id="locking.E008",
                )
            )
    replicas = setting("LOCK_REDIS_MIN_REPLICAS")
    if not (is_number(replicas, whole=True) and replicas >= 0):
        errors.append(
            Error(
                f"LOCK_REDIS_MIN_REPLICAS must be a whole number of at least 0, not {replicas!r}.",
                hint="The replicas that must confirm a grant (WAIT) before it counts; 0 "
                f"waits for none. See {SEE_REPLICAS}.",
                id="locking.E009",
            )
        )
    return errors


@register()
def client_ip_callable_imports(app_configs=None, **kwargs):
    """``LOCK_CLIENT_IP_CALLABLE`` is the dotted path of a callable that imports."""
    path = setting("LOCK_CLIENT_IP_CALLABLE")
    if path is None or path == "":
        return []
    problem = _callable_problem(path)
    if problem is None:
        return []
    hint = (
        "A dotted path to f(request) -> str | None, the address a broken lease is recorded "
        "with, e.g. 'myproject.security.client_ip'; unset, REMOTE_ADDR is used."
    )
    return [Error(f"LOCK_CLIENT_IP_CALLABLE {problem}.", hint=hint, id="locking.E010")]


@register()
def scopes_callable_imports(app_configs=None, **kwargs):
    """``LOCK_SCOPES_CALLABLE`` is the dotted path of a callable that imports."""
    problem = _callable_problem(setting("LOCK_SCOPES_CALLABLE"))
    if problem is None:
        return []
    hint = (
        "A dotted path to f(user, resources) -> locking.ViewerScopes, what each operator "
        "sees in the admin, e.g. 'myproject.ops.lock_scopes'; unset, "
        "'locking.operators.recorded_scopes'."
    )
    return [Error(f"LOCK_SCOPES_CALLABLE {problem}.", hint=hint, id="locking.E015")]


def _callable_problem(path) -> str | None:
    """What is wrong with ``path`` as the dotted path of a callable, or None."""
    if not isinstance(path, str) or not path:
        return f"is not a dotted path: {path!r}"
    try:
        found = import_string(path)
    except ImportError as error:
        return f"does not import: {error}"
    return None if callable(found) else f"is not callable: {path!r}"


@register(Tags.urls)
def receivers_have_a_secret(app_configs=None, **kwargs):
    """Every ``fenced_receiver`` view in the URLconf has a secret to verify signatures
    with: its own ``secret=`` or ``LOCK_RECEIVER_SECRET`` (else its first request is
    ``ImproperlyConfigured``)."""
    if not getattr(settings, "ROOT_URLCONF", None) or setting("LOCK_RECEIVER_SECRET"):
        return []
    return [
        Error(
            f"The fenced receiver {scope!r} at {route!r} ({view}) has no secret to verify "
            "signatures with.",
            hint="Set LOCK_RECEIVER_SECRET, or pass secret= to @fenced_receiver(); the "
            "sender signs with the same secret (seal_call).",
            id="locking.E011",
        )
        for route, view, scope in _receivers_without_secret(get_resolver().url_patterns)
    ]


def _receivers_without_secret(patterns, prefix: str = ""):
    """``(route, view name, scope)`` of each ``fenced_receiver`` view given no secret."""
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _receivers_without_secret(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            view = pattern.callback
            while view is not None and not hasattr(view, "fenced_receiver_has_secret"):
                view = getattr(view, "__wrapped__", None)
            if view is not None and not view.fenced_receiver_has_secret:
                yield route, pattern.lookup_str, view.fenced_receiver_scope


@register(Tags.models)
def fenced_models_are_routed_to_the_lock_database(app_configs=None, **kwargs):
    """A model with ``last_fence_token`` writes to ``LOCK_DATABASE``: the fence check reads
    the resource's epochs in the rows' database, in the writes' transaction, and the grant
    records them in ``LOCK_DATABASE``; apart, a token of an older epoch would pass."""
    alias = setting("LOCK_DATABASE")
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        return []  # E004 says so
    if app_configs is None:
        models = apps.get_models()
    else:
        models = [model for app_config in app_configs for model in app_config.get_models()]
    errors = []
    for model in models:
        try:
            model._meta.get_field(FENCE_FIELD)
        except FieldDoesNotExist:
            continue
        written_to = router.db_for_write(model)
        if written_to != alias:
            errors.append(
                Error(
                    f"{model._meta.label} carries a fence ({FENCE_FIELD}), but the database "
                    f"routers send its writes to {written_to!r}, not LOCK_DATABASE {alias!r}.",
                    hint="Route the fenced models to LOCK_DATABASE (DATABASE_ROUTERS), or set "
                    "LOCK_DATABASE to their database: the epochs the fence checks must be in "
                    "the rows' own database.",
                    obj=model,
                    id="locking.E012",
                )
            )
    return errors


@register()
def settings_are_known(app_configs=None, **kwargs):
    """A ``LOCK_`` setting locking does not read is most likely a misspelt one, which
    leaves its default in force (``LOCK_REDIS_ULR``: the Redis on 127.0.0.1:6379)."""
    warnings = []
    for name in sorted(name for name in dir(settings) if name.startswith("LOCK_")):
        if name in SETTING_NAMES:
            continue
        close = difflib.get_close_matches(name, SETTING_NAMES, n=1)
        hint = (
            f"Did you mean {close[0]}?"
            if close
            else f"locking reads {', '.join(SETTING_NAMES)}. See {SEE_SETTINGS}."
        )
        warnings.append(
            CheckWarning(
                f"{name} is not a setting of locking: it has no effect.",
                hint=hint,
                id="locking.W002",
            )
        )
    return warnings
