"""System checks for lock settings."""

from django.conf import settings
from django.core.checks import Error, Warning, register

from locking.conf import setting

# An external call should finish well within the lease, or the lease routinely expires
# mid-call and work is done twice (safely rejected by the fence, but wasted).
COMFORTABLE_SHARE_OF_TTL = 0.5


@register()
def external_timeout_below_lock_ttl(app_configs=None, **kwargs):
    """Warn when EXTERNAL_CALL_TIMEOUT_SECONDS is not comfortably below a lease TTL setting
    that LOCK_TTL_SETTINGS names."""
    timeout = setting("EXTERNAL_CALL_TIMEOUT_SECONDS")
    if timeout is None:
        return []
    messages = []
    for name in setting("LOCK_TTL_SETTINGS"):
        # The project's own settings, named by LOCK_TTL_SETTINGS: read by name.
        ttl = getattr(settings, name, None)
        if ttl is None:
            messages.append(
                Error(
                    f"LOCK_TTL_SETTINGS names {name}, which is not set.",
                    hint="List only the settings that hold a lease TTL in seconds.",
                    id="locking.E002",
                )
            )
            continue
        ttl = float(ttl)
        if float(timeout) > ttl * COMFORTABLE_SHARE_OF_TTL:
            messages.append(
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
    return messages


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
