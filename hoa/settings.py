"""Settings for the HOA platform, read once from the environment.

Every variable is optional and defaults to the project-local services that
``scripts/services.sh`` starts (PostgreSQL on 127.0.0.1:55432, Redis on
127.0.0.1:56379, or the ports ``HOA_PG_PORT`` and ``HOA_REDIS_PORT`` give them, as ``make``
does). Production runs with ``DEBUG=0`` and must set ``SECRET_KEY``.
Code reads ``django.conf.settings``, never ``os.environ``.
"""

import ipaddress
import os
import re
import sys
from pathlib import Path

import dj_database_url
import dj_email_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_number(name: str, default: float, *, minimum: float = 0, cast=float):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {raw!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set SECRET_KEY in the environment, or DEBUG=1 for local "
            "development (make run and make test do that for you)."
        )
    SECRET_KEY = "django-insecure-local-development-only-never-use-in-production"  # noqa: S105

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG else [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "csp",
    "django_ratelimit",
    "locking",
    "hoa",
    "charges",
    "vendors",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    # A method the view does not take is a 405 with Allow, before the CSRF check's 403.
    "hoa.security.permissions.AllowedMethodsMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "hoa.ops.middleware.DatabaseUnavailableMiddleware",
    # Turns django-ratelimit's Ratelimited into RATELIMIT_VIEW's 429 page.
    "django_ratelimit.middleware.RatelimitMiddleware",
]

ROOT_URLCONF = "hoa.urls"
WSGI_APPLICATION = "hoa.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "hoa.web.context_processors.organization_links",
                "hoa.web.context_processors.viewer",
            ],
        },
    },
]

# Django's form renderer, less the templates of empty error lists (hoa/web/fields.py).
FORM_RENDERER = "hoa.web.fields.FormRenderer"

# --- Data stores -------------------------------------------------------------------------

# Without DATABASE_URL / REDIS_URL, a command run by hand (manage.py seed_demo) finds the
# project-local services on the ports make and scripts/services.sh started them on.
LOCAL_PG_PORT = os.environ.get("HOA_PG_PORT", "55432")
LOCAL_REDIS_PORT = os.environ.get("HOA_REDIS_PORT", "56379")
DATABASE_URL = os.environ.get("DATABASE_URL", f"postgres://hoa@127.0.0.1:{LOCAL_PG_PORT}/hoa")
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL,
        conn_max_age=int(env_number("CONN_MAX_AGE", 60, cast=int)),
        conn_health_checks=True,
    )
}
if not DATABASES["default"]["ENGINE"].endswith("postgresql"):
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL (postgres://…)")
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # The same backend with a read timeout (hoa/ops/postgresql/base.py).
    DATABASES["default"]["ENGINE"] = "hoa.ops.postgresql"
DATABASES["default"].setdefault("OPTIONS", {})
# Fail fast when PostgreSQL is unreachable or black-holed instead of hanging a worker until
# gunicorn kills it: every bound below ends in django.db.OperationalError, which
# hoa.ops.middleware answers with a 503 (docs/reliability.md, "PostgreSQL partitions").
_pg_options = DATABASES["default"]["OPTIONS"]
_pg_options.setdefault(
    "connect_timeout", int(env_number("DATABASE_CONNECT_TIMEOUT_SECONDS", 5, minimum=1, cast=int))
)
# Our read timeout: no wait for the server (a query, a COMMIT) lasts longer. 0 turns it off.
_pg_options.setdefault("read_timeout", env_number("DATABASE_READ_TIMEOUT_SECONDS", 30.0))
# The kernel's own bounds: keepalives notice a peer that vanished while idle,
# tcp_user_timeout (ms) one that stopped acknowledging what was sent.
_pg_options.setdefault("keepalives", 1)
_pg_options.setdefault(
    "keepalives_idle", int(env_number("DATABASE_KEEPALIVES_IDLE_SECONDS", 10, minimum=1, cast=int))
)
_pg_options.setdefault("keepalives_interval", 2)
_pg_options.setdefault("keepalives_count", 3)
_pg_options.setdefault(
    "tcp_user_timeout", int(env_number("DATABASE_TCP_USER_TIMEOUT_SECONDS", 10, cast=float) * 1000)
)
# And the server's: no statement runs longer than this (ms; 0 turns it off).
_statement_timeout_ms = int(env_number("DATABASE_STATEMENT_TIMEOUT_SECONDS", 30, cast=float) * 1000)
if _statement_timeout_ms:
    _pg_options["options"] = " ".join(
        filter(
            None, [_pg_options.get("options", ""), f"-c statement_timeout={_statement_timeout_ms}"]
        )
    )
# Test runs may share one server: TEST_DATABASE_NAME keeps their databases apart.
if os.environ.get("TEST_DATABASE_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["TEST_DATABASE_NAME"]}
# Behind PgBouncer in transaction mode, server-side cursors cannot span transactions.
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env_bool("DISABLE_SERVER_SIDE_CURSORS", False)

REDIS_URL = os.environ.get("REDIS_URL", f"redis://127.0.0.1:{LOCAL_REDIS_PORT}/0")
# The fence lock may live on another Redis (Sentinel, Cluster, one with appendfsync always).
LOCK_REDIS_URL = os.environ.get("LOCK_REDIS_URL", REDIS_URL)
REDIS_SOCKET_TIMEOUT_SECONDS = env_number("REDIS_SOCKET_TIMEOUT_SECONDS", 2.0)
# The lock's Redis client has the same short timeouts as the cache's (locking/conf.py).
LOCK_REDIS_SOCKET_TIMEOUT_SECONDS = REDIS_SOCKET_TIMEOUT_SECONDS
# Replicas that must confirm a grant (WAIT) before it counts; docs/locking/epochs.md has the table
# of what each Redis deployment guarantees with and without it.
LOCK_REDIS_MIN_REPLICAS = env_number("LOCK_REDIS_MIN_REPLICAS", 0, cast=int)
LOCK_REDIS_WAIT_TIMEOUT_MS = env_number("LOCK_REDIS_WAIT_TIMEOUT_MS", 100, minimum=1, cast=int)

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            "SOCKET_CONNECT_TIMEOUT": REDIS_SOCKET_TIMEOUT_SECONDS,
            "SOCKET_TIMEOUT": REDIS_SOCKET_TIMEOUT_SECONDS,
        },
        "KEY_PREFIX": "hoa",
    }
}

# Sessions in the cache with the database behind them (hoa/sessions.py): a request reads
# its session from Redis, not PostgreSQL. A cached copy lives at most this long, which
# bounds how long a session deleted while Redis was unreachable can outlive its sign-out.
SESSION_ENGINE = "hoa.sessions"
SESSION_CACHE_ALIAS = "default"
SESSION_CACHE_SECONDS = env_number("SESSION_CACHE_SECONDS", 300, minimum=1, cast=int)

# --- Fenced operations ------------------------------------------------------------------

BILLING_WEBHOOK_URL = os.environ.get("BILLING_WEBHOOK_URL", "")
VENDOR_DISPATCH_URL = os.environ.get("VENDOR_DISPATCH_URL", "")
# Unlike the two above, never skipped when unset: paying an invoice is refused (503, exit 1)
# and `check --deploy` reports an error (vendors.E001).
VENDOR_PAYMENT_URL = os.environ.get("VENDOR_PAYMENT_URL", "")
WEBHOOK_SIGNING_SECRET = os.environ.get("WEBHOOK_SIGNING_SECRET", "")
EXTERNAL_CALL_TIMEOUT_SECONDS = env_number("EXTERNAL_CALL_TIMEOUT_SECONDS", 10.0)
# Each fenced operation declares its lease TTL and the setting that overrides it
# (CHARGES_LOCK_TTL_SECONDS: 60 s, VENDOR_LOCK_TTL_SECONDS: 30 s,
# VENDOR_PAYMENT_LOCK_TTL_SECONDS: 30 s); any <NAME>_LOCK_TTL_SECONDS
# in the environment becomes that setting, so a new operation needs no line here.
globals().update(
    {
        name: env_number(name, 0.0, minimum=0.01)
        for name in os.environ
        if re.fullmatch(r"[A-Z][A-Z0-9_]*_LOCK_TTL_SECONDS", name)
    }
)
# The months staff and cron may bill: this many back from the current month and this many
# ahead. A month outside is refused (400, exit 1) with a sentence naming the range; a month
# other than this one or the next needs an explicit confirmation on the page and in the
# admin action.
CHARGE_MONTHS_BACK = env_number("CHARGE_MONTHS_BACK", 24, cast=int)
CHARGE_MONTHS_AHEAD = env_number("CHARGE_MONTHS_AHEAD", 3, cast=int)
# The day of the month by which every association's month start must be complete: /metrics
# exports it (charges_month_start_deadline_day) for the alert in deploy/prometheus/alerts.yml.
CHARGES_MONTH_START_DEADLINE_DAY = env_number(
    "CHARGES_MONTH_START_DEADLINE_DAY", 2, minimum=1, cast=int
)
if CHARGES_MONTH_START_DEADLINE_DAY > 28:
    raise ImproperlyConfigured(
        "CHARGES_MONTH_START_DEADLINE_DAY must be a day from 1 to 28, "
        f"got {CHARGES_MONTH_START_DEADLINE_DAY}"
    )
# The currency of the assessments (ISO 4217), shown with the locale's format.
CURRENCY = os.environ.get("CURRENCY", "USD").strip().upper() or "USD"
LOCK_FENCE_EVENT_RETENTION_DAYS = int(env_number("FENCE_EVENT_RETENTION_DAYS", 90, cast=int))
ACCESS_DENIAL_RETENTION_DAYS = int(env_number("ACCESS_DENIAL_RETENTION_DAYS", 90, cast=int))
# Days a closed complaint keeps its reporter's email and phone (forget_reporters erases them).
REPORTER_RETENTION_DAYS = int(env_number("REPORTER_RETENTION_DAYS", 365, minimum=1, cast=int))

# --- Auth, i18n, static ------------------------------------------------------------------

# Django's ModelBackend with a user's own and group permissions read in one query.
AUTHENTICATION_BACKENDS = ["hoa.security.permissions.PermissionsInOneQueryBackend"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "hoa:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
# One way to show a moment, the admin's too: 2026-12-03 17:44 EST (hoa/formats, hoa.dates).
FORMAT_MODULE_PATH = ["hoa.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Hashed, compressed file names in production (needs collectstatic, which `make serve`
# runs); plain names where no collectstatic ran (development, tests).
STATIC_MANIFEST = env_bool("STATIC_MANIFEST", not DEBUG)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if STATIC_MANIFEST
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
# Serve app static files straight from their folders when collectstatic has not run.
WHITENOISE_USE_FINDERS = not STATIC_MANIFEST

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Email (password reset) --------------------------------------------------------------


def email_settings(url: str) -> dict:
    """The ``EMAIL_*`` settings an email URL names (dj-email-url), checked: an unknown
    scheme or a bad port is an error here, not a silent fallback to localhost:25. The
    URL carries a password, so no message repeats it."""
    scheme, separator, _rest = url.partition("://")
    if not separator or scheme not in dj_email_url.SCHEMES:
        raise ImproperlyConfigured(
            "EMAIL_URL must start with one of "
            + ", ".join(f"{name}://" for name in dj_email_url.SCHEMES)
            + f" (e.g. smtp://user:password@mail.example.org:587/?tls=True), got {scheme!r}"
        )
    try:
        parsed = dj_email_url.parse(url)
    except ValueError as exc:  # a port or a timeout that is not a number
        raise ImproperlyConfigured(f"EMAIL_URL is not a valid email URL: {exc}") from None
    return {
        **parsed,
        "EMAIL_HOST_USER": parsed["EMAIL_HOST_USER"] or "",
        "EMAIL_HOST_PASSWORD": parsed["EMAIL_HOST_PASSWORD"] or "",
        # An SMTP server that accepts the connection and then says nothing must not hold
        # a web worker for ever.
        "EMAIL_TIMEOUT": parsed["EMAIL_TIMEOUT"] or 10,
    }


# e.g. smtp://user:password@mail.example.org:587/?tls=True, console://. Without it, mail
# goes to the console in development (DEBUG) and nowhere in production, where the password
# reset page says that email is not set up instead of pretending to have sent a link.
EMAIL_URL = os.environ.get("EMAIL_URL", "").strip()
_email = email_settings(EMAIL_URL) if EMAIL_URL else {}
EMAIL_CONFIGURED = bool(EMAIL_URL) or DEBUG
EMAIL_BACKEND = _email.get(
    "EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = _email.get("EMAIL_HOST") or "localhost"
EMAIL_PORT = _email.get("EMAIL_PORT") or 25
EMAIL_HOST_USER = _email.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _email.get("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = _email.get("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = _email.get("EMAIL_TIMEOUT", 10)
if _email.get("EMAIL_FILE_PATH"):
    EMAIL_FILE_PATH = _email["EMAIL_FILE_PATH"]
# The sender of every mail (password resets); the URL's ?_default_from_email= also works.
_sender = os.environ.get("DEFAULT_FROM_EMAIL", "").strip() or _email.get("DEFAULT_FROM_EMAIL")
if not _sender and not DEBUG and EMAIL_BACKEND.endswith("smtp.EmailBackend") and EMAIL_URL:
    raise ImproperlyConfigured(
        "EMAIL_URL is set but DEFAULT_FROM_EMAIL is not: set the address mail is sent from "
        "(e.g. DEFAULT_FROM_EMAIL='Maple Court HOA <hoa@example.org>')."
    )
DEFAULT_FROM_EMAIL = _sender or "HOA staff <noreply@localhost>"
SERVER_EMAIL = os.environ.get("SERVER_EMAIL", "").strip() or DEFAULT_FROM_EMAIL
# Where the staff pages are served, as people's mail links to it (a reporter's opt-out
# link: send_reporter_emails runs from cron, with no request to take the host from).
SITE_URL = os.environ.get("SITE_URL", "").strip().rstrip("/") or "http://127.0.0.1:8000"
if not SITE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"SITE_URL must start with http:// or https://, got {SITE_URL!r}")

# --- Production hardening (active when DEBUG is off) ------------------------------------

if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = int(env_number("SECURE_HSTS_SECONDS", 31536000, cast=int))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_HTTPONLY = True
# No script of ours reads the CSRF cookie: forms carry the token in a hidden field.
CSRF_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    # Opt-in: only behind a proxy that always sets X-Forwarded-Proto itself.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# A stale or foreign form gets the site's own 403 page, saying what to do.
CSRF_FAILURE_VIEW = "hoa.web.views.csrf_failure"
# Prometheus and load-balancer probes reach each instance over plain HTTP on its private
# address.
SECURE_REDIRECT_EXEMPT = [r"^metrics$", r"^healthz$", r"^readyz$"]

# The address rate limits and the audit use: REMOTE_ADDR, or (opt-in, only behind a proxy
# that always overwrites it) this header, e.g. "X-Real-IP" (docs/security.md).
CLIENT_IP_HEADER = os.environ.get("CLIENT_IP_HEADER", "").strip()
# A broken lease (the ops page and locking's admin action) records the same address.
LOCK_CLIENT_IP_CALLABLE = "hoa.security.audit.client_ip"
# What each operator sees and may break in locking's admin: their associations' attempts
# and leases (the lock status page's rule).
LOCK_SCOPES_CALLABLE = "hoa.ops.lockscopes.lock_scopes"

# Content-Security-Policy (django-csp): our pages use no inline script or style, so
# nothing inline runs even if some text escaped its escaping. docs/security.md.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

# --- Abuse limits (django-ratelimit on the default cache; docs/security.md) --------------


def env_rate(name: str, default: str) -> str:
    raw = os.environ.get(name, "").strip() or default
    if not re.fullmatch(r"[1-9][0-9]*/([1-9][0-9]*)?[smhd]", raw):
        raise ImproperlyConfigured(f"{name} must be a rate like 30/m or 5/15m, got {raw!r}")
    return raw


# Benchmarks and load tests turn the limits off (RATELIMIT_ENABLE=0) or raise them.
RATELIMIT_ENABLE = env_bool("RATELIMIT_ENABLE", True)
RATELIMIT_USE_CACHE = "default"
# A cache outage lets requests through (logged) rather than refusing everyone.
RATELIMIT_FAIL_OPEN = True
RATELIMIT_VIEW = "hoa.web.views.too_many_requests"
# Fenced POSTs (generate charges, assign a vendor; staff pages and admin actions alike).
FENCED_POST_RATE = env_rate("FENCED_POST_RATE", "30/m")  # per user
FENCED_POST_IP_RATE = env_rate("FENCED_POST_IP_RATE", "120/m")  # per client address
# Sign-in attempts per client address, and failures per username and address before the
# pair is locked out for the rest of the window.
LOGIN_RATE = env_rate("LOGIN_RATE", "10/m")
LOGIN_LOCKOUT_RATE = env_rate("LOGIN_LOCKOUT_RATE", "5/15m")
# Password reset requests (each may send a mail) per client address.
PASSWORD_RESET_RATE = env_rate("PASSWORD_RESET_RATE", "5/15m")
# Refusals written to the audit table per client address; more are only logged.
AUDIT_DENIAL_RATE = env_rate("AUDIT_DENIAL_RATE", "60/m")

# --- Metrics (docs/operations.md) --------------------------------------------------------

# /metrics answers these addresses or networks when the request did not come through a
# proxy ("none": no address), and any request with "Authorization: Bearer <METRICS_TOKEN>".
METRICS_ALLOWED_IPS = env_list("METRICS_ALLOWED_IPS", ["127.0.0.1", "::1"])
if METRICS_ALLOWED_IPS == ["none"]:
    METRICS_ALLOWED_IPS = []
for _network in METRICS_ALLOWED_IPS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"METRICS_ALLOWED_IPS: {_network!r} is not an IP address or network"
        ) from None
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# Several worker processes (gunicorn): prometheus-client keeps each worker's samples in
# files in this directory and /metrics adds them up. scripts/serve.sh sets it per instance.
PROMETHEUS_MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")

# --- Logging ----------------------------------------------------------------------------


def _unattended_command() -> bool:
    """A management command whose output nobody watches (cron, a systemd timer): run as
    ``manage.py <command>`` with stdout not a terminal. ``runserver`` is a server, not a job."""
    argv = sys.argv
    return (
        len(argv) > 1
        and Path(argv[0]).name == "manage.py"
        and argv[1] not in {"runserver", "help"}
        and not sys.stdout.isatty()
    )


# Unset, the level is INFO, except for an unattended management command: WARNING, so a
# cron job that succeeds writes nothing (cron mails whatever it prints) and one that fails
# writes its one line. LOG_LEVEL (and DJANGO_LOG_LEVEL) set in the environment always win.
_DEFAULT_LOG_LEVEL = "WARNING" if _unattended_command() else "INFO"
LOG_LEVEL = (os.environ.get("LOG_LEVEL", "").strip() or _DEFAULT_LOG_LEVEL).upper()
# "json": one JSON object per line, with the extra= fields (resource, token, outcome).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "").strip().lower() or "plain"
if LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured(f"LOG_FORMAT must be 'plain' or 'json', got {LOG_FORMAT!r}")
# Django's own defaults (django.utils.log.DEFAULT_LOGGING) give the "django" logger a
# console handler of its own that also propagates to ours, and "django.server" (runserver's
# request lines) another format: both are replaced, so each event is one line in one format.
DJANGO_LOG_LEVEL = (os.environ.get("DJANGO_LOG_LEVEL", "").strip() or _DEFAULT_LOG_LEVEL).upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        # A 4xx is one line; only server errors (5xx) are written with their traceback.
        "tracebacks_only_for_5xx": {"()": "hoa.ops.logging.TracebacksOnlyForServerErrors"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "hoa.ops.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["tracebacks_only_for_5xx"],
        }
    },
    # The project's own loggers (the frame, locking, every app built on it) log at LOG_LEVEL
    # through the root logger: LOGGING is read before the apps load, so it names none.
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django": {"handlers": ["console"], "level": DJANGO_LOG_LEVEL, "propagate": False},
        "django.server": {"handlers": ["console"], "level": DJANGO_LOG_LEVEL, "propagate": False},
        # Libraries say what they do at INFO; only their warnings are ours to read.
        **{name: {"level": "WARNING"} for name in ("urllib3", "asyncio", "opentelemetry")},
    },
}
