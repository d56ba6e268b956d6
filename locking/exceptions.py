"""Exceptions named for the caller, each carrying the facts a caller shows."""

from datetime import datetime, timedelta


class LockError(Exception):
    """Base class of everything the locking app raises on purpose."""


class LockHeld(LockError):
    """Another holder owns the lease; nothing was written."""

    def __init__(
        self,
        resource: str,
        *,
        holder: str,
        retry_after: timedelta,
        acquired_at: datetime | None = None,
        expires_at: datetime | None = None,
        token: int | None = None,
    ):
        self.resource = resource
        self.holder = holder
        self.retry_after = retry_after
        self.acquired_at = acquired_at  # Redis clock, from the holder's grant
        self.expires_at = expires_at  # when the holder's lease runs out unless extended
        self.token = token
        super().__init__(
            f"{resource} is held by {holder or 'another process'} "
            f"(retry in {retry_after.total_seconds():.1f}s)"
        )


class LockUnavailable(LockError):
    """The lock service (Redis) could not be reached or timed out; nothing was written."""

    def __init__(self, resource: str, reason: str):
        self.resource = resource
        self.reason = reason
        super().__init__(f"lock service unavailable for {resource}: {reason}")


class StaleFencingToken(LockError):
    """A newer holder's token is already recorded: this holder lost its lease."""

    def __init__(self, token: int, recorded: int):
        self.token = token
        self.recorded = recorded
        super().__init__(
            f"fencing token {token} is stale: the resource already recorded token {recorded}"
        )
