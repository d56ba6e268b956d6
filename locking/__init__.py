"""Fenced distributed writes for Django: a Redis lease with a fencing token, checked by
PostgreSQL in the same transaction as the write.

The four layers (see docs/locking/index.md for the full story and diagrams):

1. **Lease** — ``SET lock:{r} <owner> NX PX <ttl>`` in Redis. Usually only one worker
   does the work. Efficiency, not safety: a paused holder outlives its lease.
2. **Token** — ``INCR fence:{r}`` in the same Lua script as the SET: every grant gets a
   strictly larger number, in grant order, in one round trip.
3. **Fence check** — ``advance_fence(queryset, lease)``: one statement inside the
   transaction that writes: the claim on the resource's durable record (no newer epoch, a
   newer token or the same grant) and a conditional UPDATE of exactly one row. A holder
   whose lease was re-granted cannot commit after the newer holder has. A row that does
   not exist yet can be created fenced: ``insert_fenced(instance, lease)``; the claim alone,
   before telling the outside anything: ``claim_fence(lease)``. Every entry point takes
   the lease (or its ``lease.fencing_token``), never a bare number: ``TypeError``.
4. **Business invariants** — the caller's state check and unique constraints in the
   same transaction: exactly-once even when the older holder commits first.

::

    client A                 Redis                    PostgreSQL
       |-- acquire ---------->|  SET NX PX + INCR -> 5
       |   (pauses: GC, SIGSTOP, slow call) ... lease expires
       |                      |<-- acquire ----- client B: token 6
       |                      |                    B: UPDATE … WHERE last < 6 -> 1 row, COMMIT
       |-- wakes: UPDATE … WHERE last < 5 ---------->  0 rows -> StaleFencingToken, ROLLBACK

Public names (import them from ``locking``, never from its modules; models come from
``locking.models``, which Django loads after the app registry). ``__all__`` is the
documented interface (docs/locking/index.md)::

    lease = FenceLock().acquire("vendor-assignment:complaint:42", ttl=timedelta(seconds=30))
    with transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=42), lease)
        ...writes...
    lease.release()

The same from async code, with classes of their own as redis-py has them: ``lease = await
AsyncFenceLock().acquire(...)``, ``await aadvance_fence(queryset, lease, write)`` (the fence
and the writes in one transaction, in ``sync_to_async``), ``await lease.release()``; or
``arun_fenced`` for the whole flow.
``LeasedAttempt`` is ``run_fenced`` in two halves, for attempts that commit together.
``lease.state`` is ``LeaseState.HELD``, ``UNCERTAIN`` or ``LOST``; ``lease.check()`` raises
``LeaseLost`` once the lease is lost (``LeaseUncertain``, a ``LeaseLost``, while the holder
cannot know whether it still runs); ``span(...)`` traces a step
of the work (OpenTelemetry API). Operators read and break leases with ``holders``,
``holder_of`` and ``break_lease`` (every page that breaks one uses ``BreakLeaseForm``; the
project says what each viewer may see with a ``ViewerScopes``, ``LOCK_SCOPES_CALLABLE``); a
batch of new resources records its first epochs at once with ``prepare_fences``.

The service that *receives* a fenced call can refuse a stale one too: ``seal_call`` signs
what a sender posts, and ``fenced_receiver`` (a view decorator) or ``receive_call`` verify
it and keep, per ``Idempotency-Key``, the highest token accepted (a higher one replaces the
earlier call, a lower one is answered 409, which the sender raises as
``StaleAtReceiver``).
"""

# The one place the version is written: pyproject.toml reads it (setuptools' dynamic
# version, without importing the package), so a checkout and a built wheel say the same.
__version__ = "3.0.0"

from locking.advisory import advisory_key, advisory_lock
from locking.asyncio import AsyncFenceLock, AsyncLease
from locking.audit import Attempt, record_fence_event
from locking.exceptions import (
    LeaseLost,
    LeaseUncertain,
    LockError,
    LockHeld,
    LockUnavailable,
    StaleAtReceiver,
    StaleFencingToken,
)
from locking.fence import aadvance_fence, advance_fence, claim_fence, insert_fenced
from locking.guard import InstallFenceGuard, unfenced_writes
from locking.keys import fence_key, lock_key, validate_resource
from locking.lease import Lease
from locking.lock import FenceLock, prepare_fences
from locking.operation import LeasedAttempt, arun_fenced, run_fenced
from locking.operators import (
    BreakLeaseForm,
    HolderInfo,
    ViewerScopes,
    break_lease,
    holder_of,
    holders,
)
from locking.outcomes import HolderState, LeaseState, Outcome
from locking.receiving.receiver import CallVerdict, Receipt, fenced_receiver, receive_call
from locking.receiving.signing import FencedCall, SealedCall, seal_call, verify_signature
from locking.tokens import FencingToken
from locking.tracing import span

__all__ = [
    "AsyncFenceLock",
    "AsyncLease",
    "Attempt",
    "BreakLeaseForm",
    "CallVerdict",
    "FenceLock",
    "FencedCall",
    "FencingToken",
    "HolderInfo",
    "HolderState",
    "InstallFenceGuard",
    "Lease",
    "LeaseLost",
    "LeaseState",
    "LeaseUncertain",
    "LeasedAttempt",
    "LockError",
    "LockHeld",
    "LockUnavailable",
    "Outcome",
    "Receipt",
    "SealedCall",
    "StaleAtReceiver",
    "StaleFencingToken",
    "ViewerScopes",
    "aadvance_fence",
    "advance_fence",
    "advisory_key",
    "advisory_lock",
    "arun_fenced",
    "break_lease",
    "claim_fence",
    "fence_key",
    "fenced_receiver",
    "holder_of",
    "holders",
    "insert_fenced",
    "lock_key",
    "prepare_fences",
    "receive_call",
    "record_fence_event",
    "run_fenced",
    "seal_call",
    "span",
    "unfenced_writes",
    "validate_resource",
    "verify_signature",
]
