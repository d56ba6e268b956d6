"""The audit trail of fenced attempts (``FenceEvent``)."""

import logging

from django.db import DatabaseError, connections

from locking.outcomes import Outcome

logger = logging.getLogger(__name__)


def record_fence_event(
    *,
    resource: str,
    outcome: Outcome,
    token: int | None = None,
    actor: str = "",
    detail: str = "",
    scope: str = "",
    operation: str = "",
    ip: str | None = None,
    using: str = "default",
):
    """Write one ``FenceEvent`` and log it. Call it after the operation's transaction ended.

    A rejected write rolls back its own transaction; recording the rejection outside that
    transaction is what keeps the rejection on record. Never raises on a database error:
    the audit must not turn an answered request into a 500.
    """
    from locking.models import FenceEvent

    log_extra = {"resource": resource, "token": token, "outcome": outcome, "actor": actor}
    logger.info("fenced attempt %s", outcome, extra=log_extra)
    if connections[using].in_atomic_block:
        logger.warning(
            "recording a fence event inside a transaction: a rollback would erase it",
            extra=log_extra,
        )
    try:
        return FenceEvent.objects.using(using).create(
            resource=resource,
            outcome=outcome,
            token=token,
            actor=actor[:200],
            detail=detail,
            scope=scope[:100],
            operation=operation[:50],
            ip=ip,
        )
    except DatabaseError:
        logger.exception("could not record fence event", extra=log_extra)
        return None
