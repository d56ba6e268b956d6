"""An adopter's code, as mypy reads it: every name of ``locking.__all__``, each type checked.

Never run, only type-checked: ``make test-locking-matrix`` runs ``mypy --strict
--disallow-any-expr`` on this file against the installed wheel (scripts/locking_matrix.py),
then against a copy of the wheel without ``py.typed``, which must fail. Every name of
``locking.__all__`` appears in an ``assert_type`` (locking/tests/test_typing.py checks it),
so a name that loses its types, or gains an ``Any``, fails the run.
"""

from datetime import datetime, timedelta
from typing import assert_type

from django.db import transaction
from django.db.migrations.operations.base import Operation
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from opentelemetry.trace import Span

from locking import (
    FenceLock,
    FencingToken,
    InstallFenceGuard,
    Lease,
    LeasedAttempt,
    LeaseLost,
    LeaseState,
    LeaseUncertain,
    LockError,
    LockHeld,
    LockUnavailable,
    Outcome,
    StaleFencingToken,
    advance_fence,
    claim_fence,
    insert_fenced,
    post_fenced,
    prepare_fences,
    run_fenced,
    unfenced_writes,
)
from locking.advisory import advisory_key, advisory_lock
from locking.asyncio import AsyncFenceLock, AsyncLease, aadvance_fence, arun_fenced
from locking.audit import Attempt, record_fence_event
from locking.keys import fence_key, lock_key, validate_resource
from locking.models import FencedModel, FenceEvent
from locking.operators import (
    BreakLeaseForm,
    HolderInfo,
    HolderState,
    ViewerScopes,
    break_lease,
    holder_of,
    holders,
)
from locking.receiving import (
    CallVerdict,
    FencedCall,
    Receipt,
    SealedCall,
    StaleAtReceiver,
    fenced_receiver,
    receive_call,
    seal_call,
    verify_signature,
)
from locking.sending import CallAnswer, CallOutcomeUnknown, CallRefused
from locking.testing import Delivery, LeaseFactory, PausedHolder, ReceiverClient, older_token
from locking.tracing import span

TTL = timedelta(seconds=30)
SECRET = "a shared secret"


class Invoice(FencedModel):
    """A fenced row of the adopter's own. Its querysets and instances come in as arguments:
    with or without django-stubs' plugin, a model class used in an expression is a
    constructor taking ``*args: Any``, which ``--disallow-any-expr`` reports in any code."""


def an_adopter_saves_a_fenced_row(invoice: Invoice) -> None:
    """Issue 45, item 6: ``FencedModel.save()`` was unannotated, so every ``save()`` on an
    adopter's model failed ``--strict`` ("call to untyped function")."""
    assert_type(invoice.save(), None)
    assert_type(invoice.save(update_fields=["last_fence_token"], using="default"), None)


def the_sync_lock(invoices: "QuerySet[Invoice]", new: Invoice) -> None:
    lock = FenceLock()
    assert_type(lock, FenceLock)
    assert_type(validate_resource("invoice:7"), str)
    lease = lock.acquire("invoice:7", ttl=TTL, holder="alice")
    assert_type(lease, Lease)
    assert_type(lease.token, int)
    assert_type(lease.owner, str)
    assert_type(lease.state, LeaseState)
    assert_type(lease.expires_at, datetime)
    assert_type(lease.fencing_token, FencingToken)
    assert_type(lease.lost.reason, str)
    assert_type(lease.lost.is_set(), bool)
    assert_type(lease.extend(TTL), bool)
    assert_type(lease.check(), None)

    @lease.on_lost
    def stop(lost: Lease) -> str:
        return lost.resource

    assert_type(stop(lease), str)
    with lease.keep_alive() as kept:
        assert_type(kept, Lease)
    with transaction.atomic():
        assert_type(advance_fence(invoices, lease), None)
        assert_type(claim_fence(lease.fencing_token), None)
        assert_type(insert_fenced(new, lease), bool)
        with advisory_lock("nightly-job") as acquired:
            assert_type(acquired, bool)
        assert_type(advisory_lock("nightly-job").__enter__(), bool)
        with unfenced_writes() as unfenced:
            assert_type(unfenced, None)
        assert_type(unfenced_writes().__enter__(), None)
    assert_type(lease.release(), bool)
    assert_type(advisory_key("nightly-job"), int)
    assert_type(lock.current_token(lease.resource), int)
    assert_type(prepare_fences(["invoice:8"], lock=lock), int)
    assert_type(lock_key("invoice:8"), str)
    assert_type(fence_key("invoice:8"), str)


def the_whole_flow(invoice_id: int) -> None:
    attempt = Attempt(actor="alice", operation="send_invoice", scope="org:1")
    assert_type(attempt, Attempt)

    def work(lease: Lease) -> int:
        with span("external-call", lease=lease) as current:
            assert_type(current, Span)
        assert_type(span("external-call", resource=lease.resource).__enter__(), Span)
        return lease.token

    assert_type(run_fenced(f"invoice:{invoice_id}", work, ttl=TTL, attempt=attempt), int)
    leased = LeasedAttempt(f"invoice:{invoice_id}", ttl=TTL, attempt=attempt)
    assert_type(leased, LeasedAttempt)
    assert_type(leased.lease, Lease | None)
    assert_type(leased.finished("done"), None)
    assert_type(
        record_fence_event(resource="invoice:7", outcome=Outcome.BROKEN, actor="alice"),
        FenceEvent | None,
    )


async def the_async_lock(invoice_id: int, invoices: "QuerySet[Invoice]") -> None:
    lock = AsyncFenceLock()
    assert_type(lock, AsyncFenceLock)
    lease = await lock.acquire(f"invoice:{invoice_id}", ttl=TTL)
    assert_type(lease, AsyncLease)
    async with lease as held:
        assert_type(held, AsyncLease)
        async with lease.keep_alive(cancel=True) as kept:
            assert_type(kept, AsyncLease)
        assert_type(await lease.extend(TTL), bool)
        assert_type(await aadvance_fence(invoices, lease, invoices.count), int)
    assert_type(await lease.release(), bool)
    assert_type(await lock.reseed(lease.resource, lease.token), int)

    async def work(lease: AsyncLease) -> str:
        return lease.owner

    assert_type(
        await arun_fenced(
            f"invoice:{invoice_id}", work, ttl=TTL, attempt=Attempt(actor="worker"), lock=lock
        ),
        str,
    )


def the_answers(error: LockError) -> str:
    assert_type(error, LockError)
    if isinstance(error, LockHeld):
        assert_type(error, LockHeld)
        assert_type(error.outcome, Outcome)
        assert_type(error.holder, str)
        assert_type(error.retry_after, timedelta)
        assert_type(error.token, int | None)
    elif isinstance(error, LockUnavailable):
        assert_type(error, LockUnavailable)
        assert_type(error.reason, str)
    elif isinstance(error, StaleAtReceiver):
        assert_type(error, StaleAtReceiver)
        assert_type(error.accepted, int | None)
    elif isinstance(error, StaleFencingToken):
        assert_type(error, StaleFencingToken)
        assert_type(error.recorded, int | None)
        assert_type(error.epoch, int | None)
    elif isinstance(error, CallRefused):
        assert_type(error, CallRefused)
        assert_type(error.status, int | None)
        assert_type(error.reason, str)
    elif isinstance(error, CallOutcomeUnknown):
        assert_type(error, CallOutcomeUnknown)
        assert_type(error.idempotency_key, str)
        assert_type(error.status, int | None)
    elif isinstance(error, LeaseUncertain):
        assert_type(error, LeaseUncertain)
        assert_type(error.reason, str)
    elif isinstance(error, LeaseLost):
        assert_type(error, LeaseLost)
        assert_type(error.token, int)
    assert_type(Outcome.STALE.value, str)
    return str(error)


def the_operators(request: HttpRequest) -> None:
    assert_type(holders(prefix="invoice:", limit=10), list[HolderInfo])
    one = holder_of("invoice:7")
    assert_type(holder_of("invoice:7"), HolderInfo | None)
    if one is not None:
        assert_type(one.state, HolderState)
        assert_type(one.expires_in, str)
        assert_type(one.token, int | None)
    assert_type(
        break_lease("invoice:7", token=7, owner="abc", by="alice", reason="worker hung"),
        HolderInfo | None,
    )
    posted: dict[str, str] = {
        "resource": "invoice:7",
        "token": "7",
        "owner": "abc",
        "reason": "worker hung",
    }
    form = BreakLeaseForm(data=posted)
    assert_type(form, BreakLeaseForm)
    if form.is_valid():
        assert_type(form.break_lease(request), HolderInfo | None)
    scopes = ViewerScopes(visible=frozenset({"org:1"}))
    assert_type(scopes, ViewerScopes)
    assert_type(scopes.may_see("invoice:7"), bool)
    guard: Operation = InstallFenceGuard("invoice")
    assert_type(InstallFenceGuard("invoice"), InstallFenceGuard)
    assert_type(InstallFenceGuard("invoice", strict=True), InstallFenceGuard)
    assert_type(InstallFenceGuard("invoice").describe(), str)
    assert_type(guard, Operation)


def the_calls(lease: Lease, answer: bytes, headers: dict[str, str], request: HttpRequest) -> None:
    sealed = seal_call(
        {"invoice": 7}, idempotency_key="invoice-7", token=lease, secret=SECRET, endpoint="billing"
    )
    assert_type(sealed, SealedCall)
    assert_type(
        seal_call({}, idempotency_key="k", token=lease.fencing_token, secret="", endpoint="e"),
        SealedCall,
    )
    assert_type(sealed.headers, dict[str, str])
    sent = post_fenced(
        "https://billing.example/hook",
        {"invoice": 7},
        lease=lease,
        idempotency_key="invoice-7",
        endpoint="billing",
        secret=SECRET,
        timeout=timedelta(seconds=5),
    )
    assert_type(sent, CallAnswer)
    assert_type(
        post_fenced(
            "https://billing.example/hook",
            {},
            lease=lease.fencing_token,
            idempotency_key="k",
            endpoint="e",
            secret="",
            timeout=5.0,
        ),
        CallAnswer,
    )
    assert_type(sent.status, int)
    assert_type(sent.content, bytes)
    assert_type(
        StaleAtReceiver.from_answer(lease, answer, headers=headers, sent=sealed, secret=SECRET),
        StaleAtReceiver,
    )
    assert_type(
        verify_signature(
            sealed.body,
            sealed.headers["X-Timestamp"],
            sealed.headers["X-Signature"],
            SECRET,
            idempotency_key="invoice-7",
            token=lease.token,
            endpoint="billing",
        ),
        bool,
    )

    def handle(call: FencedCall) -> HttpResponse:
        assert_type(call, FencedCall)
        assert_type(call.token, int)
        assert_type(call.replaces, int | None)
        assert_type(call.payload, dict[str, object])
        return HttpResponse(status=204)

    receipt = receive_call(sealed.headers, sealed.body, handle, scope="billing", secret=SECRET)
    assert_type(receive_call(headers, answer, handle, scope="billing"), Receipt)
    assert_type(receipt.verdict, CallVerdict)
    assert_type(receipt.response, HttpResponse)

    def billing(request: HttpRequest, call: FencedCall, invoice_id: int) -> HttpResponse:
        return HttpResponse(str(call.token + invoice_id))

    receiving = fenced_receiver("billing", secret=SECRET)(billing)
    assert_type(receiving(request, 7), HttpResponse)
    assert_type(fenced_receiver("billing")(billing)(request, invoice_id=7), HttpResponse)


def the_test_helpers(lock: FenceLock) -> None:
    """locking.testing, the helpers of the pytest plugin's fixtures (a documented submodule,
    not in ``__all__``)."""
    leases = LeaseFactory(lock)
    assert_type(leases.resource(), str)
    assert_type(leases(), Lease)
    assert_type(leases("invoice:7", ttl=TTL, holder="alice"), Lease)
    paused = leases.paused("invoice:7")
    assert_type(paused, PausedHolder)
    assert_type(paused.lease, Lease)
    assert_type(paused.token, int)
    assert_type(paused.expire(), None)

    def late_write(lease: Lease) -> int:
        return lease.token

    assert_type(paused.resume(late_write), int)
    assert_type(leases.close(), None)
    client = ReceiverClient(secret=SECRET)
    delivery = client.post(
        "/hooks/billing/", {"total": "10.00"}, token=paused.lease, idempotency_key="invoice-7"
    )
    assert_type(delivery, Delivery)
    assert_type(delivery.status, int)
    assert_type(delivery.verdict, CallVerdict | None)
    assert_type(delivery.accepted, int | None)
    assert_type(delivery.answer, dict[str, object])
    assert_type(delivery.response, HttpResponse)
    assert_type(delivery.receipt, Receipt | None)
    assert_type(client.replay(delivery), Delivery)
    assert_type(client.replay_older(delivery, by=2), Delivery)
    assert_type(older_token(delivery.token), FencingToken)
