"""Helpers for management commands: fail with one clear line when a service is down."""

from django.conf import settings
from django.core.management.base import CommandError
from django.db import DatabaseError, connection
from redis.exceptions import RedisError

# EX_TEMPFAIL from sysexits.h: "try again later". Cron wrappers treat it as not an error.
EXIT_TEMPFAIL = 75


def require_services(*, database: bool = True, redis: bool = True) -> None:
    """Raise ``CommandError`` naming the service that is unreachable."""
    if database:
        try:
            connection.ensure_connection()
        except DatabaseError as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise CommandError(
                f"PostgreSQL is unreachable ({settings.DATABASES['default'].get('HOST')}:"
                f"{settings.DATABASES['default'].get('PORT')}): {first_line}"
            ) from exc
    if redis:
        from locking import FenceLock, LockUnavailable

        try:
            FenceLock().client.ping()
        except (RedisError, LockUnavailable) as exc:
            raise CommandError(f"Redis is unreachable ({settings.LOCK_REDIS_URL}): {exc}") from exc
