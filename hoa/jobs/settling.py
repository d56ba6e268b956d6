"""Settle the outside calls whose outcome is not known yet (``hoa.models.OutsideCall``).

Each operation registers its settler (``register_settler``, from ``AppConfig.ready()``): the
call made again by its idempotency key under a fresh lease, or taken back with its
cancellation. A settler returns the ``Settlement`` and a line, or ``None`` while still
unknown. One pass at a time (an advisory lock); docs/operations.md, "Outcomes not known yet".
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.db import DatabaseError
from django.db.models import Count, F, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LeaseRanOut,
    LockServiceDown,
    OutcomeUnknown,
    Refusal,
    Superseded,
)
from hoa.jobs.scheduled import pass_lock
from hoa.models import OutsideCall

logger = logging.getLogger(__name__)

SETTLE_LOCK = "hoa:settle-outside-calls"
# Who settles, as the audit and the records name it.
SETTLE_VIA = "job:settle"
DEFAULT_SETTLE_BATCH_SIZE = 100

Settled = tuple[str, str] | None  # (OutsideCall.Settlement, what happened), or still unknown

_settlers: dict[str, Callable[[OutsideCall], Settled]] = {}


def register_settler(operation: str, settle: Callable[[OutsideCall], Settled]) -> None:
    """How calls of ``operation`` are settled (from the app's ``AppConfig.ready()``)."""
    _settlers[operation] = settle


@dataclass(frozen=True)
class SettleResult:
    acquired: bool
    settled: int = 0
    left: int = 0

    @property
    def skipped(self) -> bool:
        return not self.acquired


def settle_outside_calls(
    *, batch_size: int = DEFAULT_SETTLE_BATCH_SIZE, wait: timedelta | None = None
) -> SettleResult:
    """Try to settle each unsettled call once, oldest first, up to ``batch_size``."""
    with pass_lock(SETTLE_LOCK, wait=wait) as acquired:
        if not acquired:
            return SettleResult(acquired=False)
        settled = left = 0
        calls = OutsideCall.objects.unsettled().select_related("organization")[:batch_size]
        for call in calls:
            if settle_one(call):
                settled += 1
            else:
                left += 1
    logger.log(
        logging.INFO if settled or left else logging.DEBUG,
        "outside calls settled=%d left=%d",
        settled,
        left,
        extra={"resource": SETTLE_LOCK, "outcome": "done"},
    )
    return SettleResult(acquired=True, settled=settled, left=left)


def settle_one(call: OutsideCall) -> bool:
    """Settle ``call`` by its operation's settler; return whether it is settled now."""
    settle = _settlers.get(call.operation)
    outcome = settle(call) if settle is not None else None
    rows = OutsideCall.objects.filter(pk=call.pk, settled_at__isnull=True, token=call.token)
    if outcome is None:
        OutsideCall.objects.filter(pk=call.pk).update(tries=F("tries") + 1)
        return False
    settlement, detail = outcome
    # Only the call this pass read: an unknown recorded again meanwhile stays open.
    done = rows.update(
        settled_at=timezone.now(), settlement=settlement, detail=detail[:2000], tries=F("tries") + 1
    )
    if done:
        logger.info(
            "outside call settled",
            extra={"resource": call.resource, "token": call.token, "outcome": settlement},
        )
    return bool(done)


def settled_by(run: Callable[[], object], *, refused: Callable | None = None) -> Settled:
    """Settle by running the operation again with the same key: its result is ``DONE``; the
    outside refusing it is ``REFUSED`` (it did nothing); a refusal that may pass later (busy,
    superseded, the lease or Redis lost, unknown again) leaves it unknown; any other refusal
    (what was asked can no longer be recorded) goes to ``refused(refusal)``, which may take
    it back, or leaves it unknown for an operator."""
    try:
        result = run()
    except (Busy, Superseded, LeaseRanOut, LockServiceDown, OutcomeUnknown):
        return None
    except CallFailed as refusal:
        return OutsideCall.Settlement.REFUSED, str(refusal)
    except Refusal as refusal:
        return refused(refusal) if refused is not None else None
    return OutsideCall.Settlement.DONE, str(result)


# -- what Prometheus sees ----------------------------------------------------------------------

OLDEST_UNSETTLED = "hoa_outside_calls_oldest_unsettled_seconds"
UNSETTLED = "hoa_outside_calls_unsettled"


def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    return (
        GaugeMetricFamily(
            OLDEST_UNSETTLED,
            "Seconds the oldest outside call of unknown outcome has waited to be settled "
            "(0: none waits).",
        ),
        GaugeMetricFamily(
            UNSETTLED,
            "Outside calls of unknown outcome not settled yet, by operation.",
            labels=["operation"],
        ),
    )


class UnsettledCallsCollector:
    """The unsettled outside calls, read from the database when scraped (one query)."""

    def describe(self):
        return list(_families())

    def collect(self):
        oldest, unsettled = _families()
        try:
            rows = list(
                OutsideCall.objects.unsettled()
                .order_by()
                .values_list("operation")
                .annotate(n=Count("id"), first=Min("recorded_at"))
            )
        except DatabaseError:
            logger.warning("outside call metrics: the database did not answer", exc_info=True)
            return []
        first = min((recorded for _operation, _n, recorded in rows), default=None)
        oldest.add_metric([], (timezone.now() - first).total_seconds() if first else 0.0)
        for operation, count, _recorded in rows:
            unsettled.add_metric([operation], count)
        return [oldest, unsettled]
