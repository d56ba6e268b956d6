"""The documented API of django-fenced-writes, used by a project that knows nothing else.

Real PostgreSQL and Redis; the paused holder is a thread held at a hold point past its
lease's TTL while a newer holder takes over and commits.
"""

import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

from invoices.models import Invoice
from invoices.services import asend_invoice, resource_of, send_invoice
from locking import (
    AsyncFenceLock,
    FenceLock,
    LockHeld,
    Outcome,
    StaleFencingToken,
    aadvance_fence,
    advance_fence,
    holder_of,
)
from locking.connection import aclose_async_lock_redis
from locking.models import FenceEvent

pytestmark = pytest.mark.django_db(transaction=True)
WAIT = 10  # seconds: the bound of every wait here


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


def test_the_fence_refuses_a_paused_holder_after_a_newer_holder_committed(invoice):
    lock = FenceLock()
    resource = resource_of(invoice.pk)
    acquired, resume = threading.Event(), threading.Event()
    paused = {}

    def paused_holder():
        try:
            lease = lock.acquire(resource, ttl=timedelta(milliseconds=300), holder="paused")
            paused["token"] = lease.token
            acquired.set()
            resume.wait(WAIT)  # the pause: a GC, a SIGSTOP, a slow call outliving the TTL
            with transaction.atomic():
                Invoice.objects.filter(pk=invoice.pk).update(note="by the paused holder")
                advance_fence(Invoice.objects.filter(pk=invoice.pk), lease)
        except StaleFencingToken as refused:
            paused["refused"] = refused
        finally:
            connection.close()

    thread = threading.Thread(target=paused_holder)
    thread.start()
    assert acquired.wait(WAIT)
    # Granted once the paused holder's TTL has passed.
    newer = lock.acquire(resource, ttl=timedelta(seconds=30), wait=timedelta(seconds=WAIT))
    with transaction.atomic():
        advance_fence(Invoice.objects.filter(pk=invoice.pk), newer)
        Invoice.objects.filter(pk=invoice.pk).update(note="by the newer holder")
    newer.release()
    resume.set()
    thread.join(WAIT)

    assert newer.token > paused["token"]
    assert isinstance(paused["refused"], StaleFencingToken)
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
