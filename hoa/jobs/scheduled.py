"""Scheduled jobs: the complaint SLA sweep and the notice publisher.

Any number of hosts may run them every minute. A pass holds a transaction-level advisory lock
on a connection of its own for the whole pass and works in short batches on the caller's
(``FOR UPDATE SKIP LOCKED``), so a staff edit waits on one batch at most; what it writes is
right even if passes overlap. docs/scheduling.md says why, step by step.
"""

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, InterfaceError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from hoa.jobs.delivery import deliver_notice
from hoa.models import Complaint, ComplaintEvent, Notice
from hoa.transactions import on_commit_robust
from locking.advisory import advisory_lock

logger = logging.getLogger(__name__)

# Advisory lock names; ``locking.advisory_key`` turns them into stable 64-bit keys.
SLA_SWEEP_LOCK = "hoa:sla-sweep"
PUBLISH_NOTICES_LOCK = "hoa:publish-notices"

DEFAULT_SWEEP_BATCH_SIZE = 500
DEFAULT_PUBLISH_BATCH_SIZE = 100


@dataclass(frozen=True)
class SweepResult:
    acquired: bool
    breached: int = 0
    batches: int = 0

    @property
    def skipped(self) -> bool:
        return not self.acquired


@dataclass(frozen=True)
class PublishResult:
    acquired: bool
    published: int = 0
    delivered: int = 0
    batches: int = 0

    @property
    def skipped(self) -> bool:
        return not self.acquired


def sweep_sla(
    *,
    now: datetime | None = None,
    batch_size: int = DEFAULT_SWEEP_BATCH_SIZE,
    wait: timedelta | None = None,
) -> SweepResult:
    """Mark open complaints past their SLA deadline as breached, each once, in batches."""
    check_pass_arguments(batch_size)
    with pass_lock(SLA_SWEEP_LOCK, wait=wait) as acquired:
        if not acquired:
            # DEBUG: on a cluster of cron hosts, skipping is what most passes do.
            logger.debug(
                "SLA sweep skipped: another sweep is running",
                extra={"resource": SLA_SWEEP_LOCK, "outcome": "skipped"},
            )
            return SweepResult(acquired=False)
        now = now or timezone.now()
        breached = batches = 0
        while True:
            count = _breach_batch(now=now, batch_size=batch_size)
            if count:
                batches += 1
                breached += count
            # A short batch means no unlocked overdue complaint is left; rows skipped
            # because staff hold them are the next pass's.
            if count < batch_size:
                break
    # A pass that found nothing to do is not news every minute.
    logger.log(
        logging.INFO if breached else logging.DEBUG,
        "SLA sweep done: breached=%d batches=%d",
        breached,
        batches,
        extra={"resource": SLA_SWEEP_LOCK, "outcome": "done", "breached": breached},
    )
    return SweepResult(acquired=True, breached=breached, batches=batches)


def publish_notices(
    *,
    now: datetime | None = None,
    batch_size: int = DEFAULT_PUBLISH_BATCH_SIZE,
    wait: timedelta | None = None,
) -> PublishResult:
    """Publish due notices, each once, and deliver each after its publication commits."""
    check_pass_arguments(batch_size)
    with pass_lock(PUBLISH_NOTICES_LOCK, wait=wait) as acquired:
        if not acquired:
            logger.debug(
                "notice publisher skipped: another sweep is running",
                extra={"resource": PUBLISH_NOTICES_LOCK, "outcome": "skipped"},
            )
            return PublishResult(acquired=False)
        now = now or timezone.now()
        delivered = _deliver_stranded(limit=batch_size)
        published = batches = 0
        while True:
            count, batch_delivered = _publish_batch(now=now, batch_size=batch_size)
            delivered += batch_delivered
            if count:
                batches += 1
                published += count
            if count < batch_size:
                break
    logger.log(
        logging.INFO if published or delivered else logging.DEBUG,
        "notice publisher done: published=%d delivered=%d",
        published,
        delivered,
        extra={"resource": PUBLISH_NOTICES_LOCK, "outcome": "done", "published": published},
    )
    return PublishResult(acquired=True, published=published, delivered=delivered, batches=batches)


def _breach_batch(*, now: datetime, batch_size: int) -> int:
    """Mark one batch of overdue complaints breached in one short transaction; return its size."""
    with transaction.atomic():
        # FOR UPDATE re-checks the filter on the locked row version, so every complaint
        # returned is still open and unbreached; complaints staff hold are skipped.
        batch = list(
            Complaint.objects.overdue(now)
            .select_for_update(skip_locked=True)
            .order_by("sla_due_at", "pk")
            .values_list("pk", "sla_due_at")[:batch_size]
        )
        if not batch:
            return 0
        Complaint.objects.filter(pk__in=[pk for pk, _ in batch]).update(sla_breached_at=now)
        # The partial unique constraint is the backstop: a second breach event for a
        # complaint would roll this batch back rather than be recorded.
        ComplaintEvent.objects.bulk_create(
            ComplaintEvent(
                complaint_id=pk,
                kind=ComplaintEvent.Kind.SLA_BREACHED,
                # The due time it passed, a moment the timeline shows in the reader's zone
                # (it used to be ISO text in UTC in the event's note).
                old_due_at=due_at,
                at=now,
            )
            for pk, due_at in batch
        )
    return len(batch)


def _publish_batch(*, now: datetime, batch_size: int) -> tuple[int, int]:
    """Publish one batch of due notices and deliver them after commit; return both counts."""
    delivered: list[int] = []
    with transaction.atomic():
        notice_ids = list(
            Notice.objects.due(now)
            .select_for_update(skip_locked=True)
            .order_by("publish_at", "pk")
            .values_list("pk", flat=True)[:batch_size]
        )
        Notice.objects.filter(pk__in=notice_ids).update(published_at=now)
        for notice_id in notice_ids:
            # robust: one failed delivery must not stop the others; the next pass retries
            # it as stranded (published_at set, delivered_at empty).
            on_commit_robust(_deliver, notice_id, delivered)
    return len(notice_ids), len(delivered)


def _deliver(notice_id: int, delivered: list[int]) -> None:
    if deliver_notice(notice_id):
        delivered.append(notice_id)


def _deliver_stranded(*, limit: int) -> int:
    """Deliver notices a dead pass published but never delivered; return how many."""
    # Under the pass lock no other publisher is between its commit and its hook, so a
    # published, undelivered notice here was stranded by a crash or a failed delivery.
    stranded = list(
        Notice.objects.filter(published_at__isnull=False, delivered_at__isnull=True)
        .order_by("published_at", "pk")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(deliver_notice(notice_id) for notice_id in stranded)


def check_pass_arguments(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if connection.in_atomic_block:
        raise TransactionManagementError(
            "Scheduled jobs commit batch by batch; do not call them inside transaction.atomic()."
        )


@contextmanager
def pass_lock(name: str, *, wait: timedelta | None) -> Iterator[bool]:
    """Yield whether the advisory lock ``name`` was taken; hold it until the block ends.

    Django keeps one connection per thread, so the lock connection is a helper thread's:
    it opens a transaction, takes the lock and idles until the pass is over, while the
    caller's thread commits batch after batch on its own connection. A killed process
    loses both connections, and PostgreSQL ends the transaction and drops the lock.
    """
    acquired = False
    decided = threading.Event()  # the lock was taken or refused, or the attempt failed
    pass_over = threading.Event()

    def hold() -> None:
        nonlocal acquired
        try:
            with transaction.atomic(), advisory_lock(name, wait=wait) as acquired:
                decided.set()
                if acquired:
                    pass_over.wait()
        finally:
            decided.set()
            connection.close()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="advisory-lock") as pool:
        holder = pool.submit(hold)
        try:
            decided.wait()
            if not acquired:
                holder.result()  # re-raises a failed attempt (database down) in this thread
            yield acquired
        finally:
            pass_over.set()
    if acquired:
        try:
            holder.result()
        except (DatabaseError, InterfaceError) as exc:
            # The batches committed on their own; only the lock's empty transaction failed.
            logger.warning(
                "lost the lock connection before the pass ended: %s",
                exc,
                extra={"resource": name, "outcome": "lock_connection_lost"},
            )
