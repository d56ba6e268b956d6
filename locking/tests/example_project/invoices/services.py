"""Send an invoice exactly once, from sync and from async code, with locking's public API."""

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction

from invoices.models import Invoice
from locking import Lease, Outcome, advance_fence, run_fenced
from locking.asyncio import AsyncLease, aadvance_fence, arun_fenced
from locking.audit import Attempt

TTL = timedelta(seconds=30)


@dataclass(frozen=True)
class SendResult:
    token: int
    outcome: Outcome


def resource_of(invoice_id: int) -> str:
    return f"invoice:{invoice_id}"


def _mark_sent(invoice_id: int, token: int) -> int:
    return Invoice.objects.filter(pk=invoice_id, sent_with_token__isnull=True).update(
        sent_with_token=token
    )


def _result(sent: int, lease: Lease | AsyncLease) -> SendResult:
    return SendResult(lease.token, Outcome.COMMITTED if sent else Outcome.ALREADY_DONE)


def send_invoice(*, invoice_id: int, actor: str) -> SendResult:
    """Send the invoice under a fenced lease; a second call finds it already sent."""

    def work(lease: Lease) -> SendResult:
        lease.check()  # the outside would be called here, with lease.token
        with transaction.atomic():
            advance_fence(Invoice.objects.filter(pk=invoice_id), lease)
            return _result(_mark_sent(invoice_id, lease.token), lease)

    return run_fenced(
        resource_of(invoice_id),
        work,
        ttl=TTL,
        attempt=Attempt(actor=actor, operation="send_invoice"),
    )


async def asend_invoice(*, invoice_id: int, actor: str) -> SendResult:
    """``send_invoice`` from async code: the fence and the write in one transaction."""

    async def work(lease: AsyncLease) -> SendResult:
        lease.check()
        sent = await aadvance_fence(
            Invoice.objects.filter(pk=invoice_id),
            lease,
            lambda: _mark_sent(invoice_id, lease.token),
        )
        return _result(sent, lease)

    return await arun_fenced(
        resource_of(invoice_id),
        work,
        ttl=TTL,
        attempt=Attempt(actor=actor, operation="send_invoice"),
    )
