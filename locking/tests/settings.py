"""Settings to run locking's own tests with nothing of a project installed::

    DJANGO_SETTINGS_MODULE=locking.tests.settings pytest locking/tests   # make test-locking

Only Django's contrib apps, ``locking`` and its test models. PostgreSQL from
``DATABASE_URL``, the lock Redis from ``LOCK_REDIS_URL`` (else ``REDIS_URL``); no cache is
configured, so the lock builds its own Redis client. Under pytest-xdist each worker has its
own Redis database (``locking/tests/workers.py``) and test databases (pytest-django).
"""

import os
from urllib.parse import unquote, urlsplit

from locking.tests.workers import isolate_redis_databases

isolate_redis_databases()  # before LOCK_REDIS_URL is read below

_database = urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/locking"))

SECRET_KEY = os.environ.get("SECRET_KEY", "locking-tests-only-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "locking",
    "locking.tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "locking.tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database.path.lstrip("/"),
        "USER": unquote(_database.username or ""),
        "PASSWORD": unquote(_database.password or ""),
        "HOST": _database.hostname or "127.0.0.1",
        "PORT": _database.port or 5432,
        "TEST": {"NAME": os.environ.get("TEST_DATABASE_NAME") or None},
    }
}
# A second alias on the same server, for the tests that move the fence there
# (LOCK_DATABASE); created only for a run that collects them.
DATABASES["second"] = {
    **DATABASES["default"],
    "TEST": {
        "NAME": (DATABASES["default"]["TEST"]["NAME"] or f"test_{DATABASES['default']['NAME']}")
        + "_second"
    },
}
LOCK_REDIS_URL = os.environ.get("LOCK_REDIS_URL") or os.environ.get(
    "REDIS_URL", "redis://127.0.0.1:6379/1"
)
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
