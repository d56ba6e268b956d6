"""The documented API of django-fenced-writes, used by a project that knows nothing else.

Real PostgreSQL and Redis. The paused holder and the leases come from locking's pytest
plugin (``paused_holder``, ``lease_factory``), which the wheel installs as a pytest11
entry point: this project names it nowhere.
"""

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction

from invoices.models import Invoice
from invoices.services import asend_invoice, resource_of, send_invoice
from locking import FenceLock, LockHeld, Outcome, StaleFencingToken, advance_fence
from locking.asyncio import AsyncFenceLock, aadvance_fence
from locking.connection import aclose_async_lock_redis
from locking.models import FenceEvent
from locking.operators import holder_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def invoice():
    return Invoice.objects.create(number="2026-0001")


def test_a_lease_excludes_a_second_holder_and_each_grant_has_a_larger_token(invoice):
    lock = FenceLock()
    resource = resource_of(invoice.pk)
    with lock.acquire(resource, ttl=timedelta(seconds=30), holder="alice") as first:
        with pytest.raises(LockHeld) as busy:
            lock.acquire(resource, ttl=timedelta(seconds=30), holder="bob")
        assert busy.value.holder.startswith("alice on ")
        assert holder_of(resource).token == first.token
    assert holder_of(resource) is None
    second = lock.acquire(resource, ttl=timedelta(seconds=30), holder="bob")
    assert second.token > first.token
    assert second.release() is True
    assert second.release() is False


def test_the_fence_refuses_a_paused_holder_after_a_newer_holder_committed(
    invoice, paused_holder, lease_factory
):
    rows = Invoice.objects.filter(pk=invoice.pk)
    # Granted, then paused past its lease (a GC, a SIGSTOP, a slow call): the lease has run
    # out in Redis, its holder has not noticed.
    paused = paused_holder(resource_of(invoice.pk))
    newer = lease_factory(resource_of(invoice.pk))
    with transaction.atomic():
        advance_fence(rows, newer)
        rows.update(note="by the newer holder")

    def late_write(lease):
        with transaction.atomic():
            rows.update(note="by the paused holder")
            advance_fence(rows, lease)

    with pytest.raises(StaleFencingToken):
        paused.resume(late_write)  # the holder wakes, in a thread of its own

    assert newer.token > paused.token
    invoice.refresh_from_db()
    assert (invoice.note, invoice.last_fence_token) == ("by the newer holder", newer.token)


def test_run_fenced_sends_once_and_audits_each_attempt(invoice):
    first = send_invoice(invoice_id=invoice.pk, actor="cron")
    again = send_invoice(invoice_id=invoice.pk, actor="alice")

    assert (first.outcome, again.outcome) == (Outcome.COMMITTED, Outcome.ALREADY_DONE)
    invoice.refresh_from_db()
    assert (invoice.sent_with_token, invoice.last_fence_token) == (first.token, again.token)
    events = FenceEvent.objects.filter(resource=resource_of(invoice.pk)).order_by("at", "pk")
    assert [(e.actor, e.outcome, e.token) for e in events] == [
        ("cron", Outcome.COMMITTED, first.token),
        ("alice", Outcome.ALREADY_DONE, again.token),
    ]


def test_run_fenced_answers_busy_while_another_holds_the_lease_and_writes_nothing(invoice):
    held = FenceLock().acquire(resource_of(invoice.pk), ttl=timedelta(seconds=30))
    with held, pytest.raises(LockHeld):
        send_invoice(invoice_id=invoice.pk, actor="alice")
    invoice.refresh_from_db()
    assert invoice.sent_with_token is None
    assert list(FenceEvent.objects.values_list("outcome", flat=True)) == [Outcome.BUSY]


def test_the_async_api_grants_fences_and_runs_the_whole_flow(invoice):
    resource = resource_of(invoice.pk)

    async def main():
        try:
            lease = await AsyncFenceLock().acquire(resource, ttl=timedelta(seconds=30))
            async with lease:
                written = await aadvance_fence(
                    Invoice.objects.filter(pk=invoice.pk),
                    lease,
                    lambda: Invoice.objects.filter(pk=invoice.pk).update(note="async"),
                )
            first = await asend_invoice(invoice_id=invoice.pk, actor="async-worker")
            again = await asend_invoice(invoice_id=invoice.pk, actor="async-worker")
            return lease, written, first, again
        finally:
            await aclose_async_lock_redis()

    lease, written, first, again = async_to_sync(main)()

    assert written == 1
    assert lease.token < first.token < again.token
    assert (first.outcome, again.outcome) == (Outcome.COMMITTED, Outcome.ALREADY_DONE)
    invoice.refresh_from_db()
    assert (invoice.note, invoice.sent_with_token) == ("async", first.token)
    assert holder_of(resource) is None
