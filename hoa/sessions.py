"""Sessions in the cache (Redis) with the database behind them: no query per request.

Django's ``cached_db`` store reads a session from the cache and falls back to the database;
every write goes to both. Two things it leaves open are closed here:

- **A cache outage is a cache miss.** ``cached_db`` already reads through to the database
  when the cache fails and logs a failed write; looking up whether a new key is taken
  (sign-in) and deleting a session (sign-out) would still raise. Here they fall back to the
  database too, so sign-in and sign-out keep working while Redis is down (docs/security.md).
- **A cached copy lives at most ``SESSION_CACHE_SECONDS``.** A sign-out while the cache
  is unreachable deletes the session's row but cannot delete its cached copy; that copy
  would otherwise keep the session alive for the session's whole age once the cache is
  back. Bounded, a stolen cookie outlives its sign-out by at most that long, and the store
  reads each active session from the database once per that period.

A password change ends other sessions whatever the store (Django compares the session's
password hash with the user's on every request), and a session the database never had
(written before this store was configured, or by ``db.SessionStore``) is read from the
database once and cached.
"""

import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.sessions.backends.cached_db import SessionStore as CachedDBStore
from django.contrib.sessions.backends.db import SessionStore as DBStore
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

# What django-redis raises when Redis refuses, resets or does not answer.
CACHE_ERRORS = (RedisError, OSError)


class SessionStore(CachedDBStore):
    """``cached_db`` with a bounded cached copy and the database as the fallback."""

    def load(self):
        try:
            data = self._cache.get(self.cache_key)
        except CACHE_ERRORS as exc:
            # Read through to the database, and do not wait on the cache a second time to
            # copy the session back: a stalled Redis costs a request one socket timeout.
            logger.warning("session read from the database: cache down", extra={"reason": str(exc)})
            row = self._get_session_from_db()
            return self.decode(row.session_data) if row is not None else {}
        if data is not None:
            return data
        row = self._get_session_from_db()
        if row is None:
            return {}
        data = self.decode(row.session_data)
        self._cache_copy(data, self.get_expiry_age(expiry=row.expire_date))
        return data

    def save(self, must_create=False):
        DBStore.save(self, must_create)
        self._cache_copy(self._session, self.get_expiry_age())

    def exists(self, session_key):
        try:
            return super().exists(session_key)
        except CACHE_ERRORS:
            return DBStore.exists(self, session_key)

    def delete(self, session_key=None):
        try:
            super().delete(session_key)  # the row first, then the cached copy
        except CACHE_ERRORS as exc:
            logger.warning(
                "session deleted from the database, not from the cache; its cached copy "
                "expires within %s s",
                settings.SESSION_CACHE_SECONDS,
                extra={"reason": str(exc)},
            )

    # The async forms (``alogin``, ``request.auser()``) take the same paths.
    async def aload(self):
        return await sync_to_async(self.load)()

    async def asave(self, must_create=False):
        await sync_to_async(self.save)(must_create)

    async def aexists(self, session_key):
        return await sync_to_async(self.exists)(session_key)

    async def adelete(self, session_key=None):
        await sync_to_async(self.delete)(session_key)

    def _cache_copy(self, data, age: int) -> None:
        try:
            self._cache.set(self.cache_key, data, min(age, settings.SESSION_CACHE_SECONDS))
        except CACHE_ERRORS as exc:
            logger.warning("session not cached", extra={"reason": str(exc)})
