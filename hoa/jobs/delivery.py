"""The notice delivery hook: what happens to a notice once its publication has committed.

The publisher calls ``deliver_notice`` through ``transaction.on_commit``, so a notice whose
publication rolled back is never delivered. Delivery here is a structured log line (a mail
or push integration would hang off the same hook). ``delivered_at`` is claimed with a
conditional UPDATE before anything is handed on, so two callers, say a publisher and the
next pass retrying a notice stranded by a crash, cannot both deliver it.
"""

import logging

from django.utils import timezone

from hoa.models import Notice

logger = logging.getLogger(__name__)


def deliver_notice(notice_id: int) -> bool:
    """Deliver the published notice ``notice_id`` once; return whether this call delivered it."""
    claimed = Notice.objects.filter(
        pk=notice_id, published_at__isnull=False, delivered_at__isnull=True
    ).update(delivered_at=timezone.now())
    if not claimed:
        return False
    notice = Notice.objects.select_related("organization").get(pk=notice_id)
    logger.info(
        "notice delivered: %s",
        notice.title,
        extra={
            "resource": f"notice:{notice.pk}",
            "organization": notice.organization.slug,
            "outcome": "delivered",
        },
    )
    return True
