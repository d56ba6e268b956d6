"""System checks of the frame, run by ``manage.py check`` and at every start."""

from django.conf import settings
from django.core import checks

from hoa.operations import operations

# A call should end well within the lease: at most this share of its TTL.
COMFORTABLE_SHARE_OF_TTL = 0.5


@checks.register(checks.Tags.compatibility)
def external_calls_outlive_leases(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """``hoa.W001``: an external call made under a lease may run past it.

    Every registered fenced operation calls the outside under its lease. A call that runs
    past the lease lets a second worker start the same work: the fence keeps the data safe,
    but the work is wasted. So ``EXTERNAL_CALL_TIMEOUT_SECONDS`` should stay comfortably
    below every operation's lease TTL (its declaration's, or the setting that overrides it).
    """
    timeout = getattr(settings, "EXTERNAL_CALL_TIMEOUT_SECONDS", None)
    if timeout is None:
        return []
    timeout = float(timeout)
    return [
        checks.Warning(
            f"EXTERNAL_CALL_TIMEOUT_SECONDS ({timeout:g}s) is not comfortably below the lease "
            f"of {operation.name} ({ttl:g}s, {operation.ttl_setting or 'its declaration'}).",
            hint=(
                "A call that runs past the lease lets a second worker start the same work. The "
                "fence keeps the data safe, but the work is wasted: keep the timeout at most "
                f"{COMFORTABLE_SHARE_OF_TTL:.0%} of the TTL."
            ),
            id="hoa.W001",
        )
        for operation in operations()
        if timeout > (ttl := operation.lease_ttl.total_seconds()) * COMFORTABLE_SHARE_OF_TTL
    ]
