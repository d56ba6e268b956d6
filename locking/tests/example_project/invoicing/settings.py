"""Settings of the example project: Django's contrib apps, locking, and one app of its own.

PostgreSQL from ``DATABASE_URL``, the lock Redis from ``LOCK_REDIS_URL``.
"""

import os
from urllib.parse import unquote, urlsplit

_database = urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/invoicing"))

SECRET_KEY = os.environ.get("SECRET_KEY", "example-project-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "locking",
    "invoices",
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
LOCK_REDIS_URL = os.environ.get("LOCK_REDIS_URL", "redis://127.0.0.1:6379/3")
