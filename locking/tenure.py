"""A lease's time: the TTL every grant and renewal takes, as a ``timedelta``.

What the sync and the async lock and lease share of a TTL: one type, checked the same way
wherever a TTL is taken, and its milliseconds as Redis wants them.
"""

from datetime import timedelta

# A TTL is a timedelta everywhere one is taken (acquire, aacquire, extend, keep_alive,
# run_fenced, LeasedAttempt): a bare number would be seconds to one reader and milliseconds
# to another, and failed deep inside as an AttributeError.
TTL_TYPE_ERROR = "ttl must be a datetime.timedelta, e.g. timedelta(seconds=5)"


def require_timedelta(ttl: object) -> None:
    """Raise ``TypeError`` unless ``ttl`` is a ``timedelta``."""
    if not isinstance(ttl, timedelta):
        raise TypeError(TTL_TYPE_ERROR)


def positive_ms(ttl: timedelta) -> int:
    """``ttl`` in whole milliseconds, as Redis takes it; ``ValueError`` unless positive."""
    require_timedelta(ttl)
    ttl_ms = int(ttl.total_seconds() * 1000)
    if ttl_ms <= 0:
        raise ValueError("ttl must be positive")
    return ttl_ms


def ttl_ms_of(ttl: timedelta) -> int:
    """``positive_ms``, remembered per TTL (a deployment uses a handful)."""
    try:
        return _TTL_MS[ttl]
    except (KeyError, TypeError):
        ttl_ms = positive_ms(ttl)
        if len(_TTL_MS) < 256:
            _TTL_MS[ttl] = ttl_ms
        return ttl_ms


_TTL_MS: dict[timedelta, int] = {}
