"""System checks for lock settings."""

from django.conf import settings
from django.core.checks import Error, Warning, register

from locking.conf import setting

# An external call should finish well within the lease, or the lease routinely expires
# mid-call and work is done twice (safely rejected by the fence, but wasted).
COMFORTABLE_SHARE_OF_TTL = 0.5


@register()
def external_timeout_below_lock_ttl(app_configs=None, **kwargs):
    """Warn when EXTERNAL_CALL_TIMEOUT_SECONDS is not comfortably below a *_LOCK_TTL_SECONDS."""
    timeout = getattr(settings, "EXTERNAL_CALL_TIMEOUT_SECONDS", None)
    if timeout is None:
        return []
    warnings = []
    # set(): under override_settings, dir(settings) lists an overridden name twice.
    for name in sorted(set(dir(settings))):
        if not name.endswith("_LOCK_TTL_SECONDS"):
            continue
        ttl = float(getattr(settings, name))
        if float(timeout) > ttl * COMFORTABLE_SHARE_OF_TTL:
            warnings.append(
                Warning(
                    f"EXTERNAL_CALL_TIMEOUT_SECONDS ({timeout:g}s) is not comfortably below "
                    f"{name} ({ttl:g}s).",
                    hint=(
                        "A call that runs past the lease lets a second worker start the same "
                        "work. The fence keeps the data safe, but the work is wasted: keep the "
                        f"timeout at most {COMFORTABLE_SHARE_OF_TTL:.0%} of the TTL."
                    ),
                    id="locking.W001",
                )
            )
    return warnings


@register()
def replicas_need_a_client_that_can_wait(app_configs=None, **kwargs):
    """Refuse LOCK_REDIS_MIN_REPLICAS with Redis Cluster: its pipelines cannot run WAIT on
    the connection of the grant, so the option would silently protect nothing."""
    if int(setting("LOCK_REDIS_MIN_REPLICAS")) and str(setting("LOCK_REDIS_URL")).startswith(
        "redis+cluster://"
    ):
        return [
            Error(
                "LOCK_REDIS_MIN_REPLICAS is not supported with a redis+cluster:// lock URL.",
                hint="Use a single Redis or Sentinel for locks, or set it to 0 (docs/locking.md).",
                id="locking.E001",
            )
        ]
    return []
