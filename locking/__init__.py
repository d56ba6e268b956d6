"""Fenced distributed writes for Django: a Redis lease with a fencing token, checked by
PostgreSQL in the same transaction as the write (the documented submodules: the API
reference; the guide: the "Overview" page)::

    lease = FenceLock().acquire("vendor-assignment:complaint:42", ttl=timedelta(seconds=30))
    with transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=42), lease)
        ...writes...
    lease.release()
"""

# The one place the version is written: pyproject.toml reads it (setuptools' dynamic
# version, without importing the package), so a checkout and a built wheel say the same.
__version__ = "3.1.0"

import importlib
import warnings

from locking.exceptions import (
    LeaseLost,
    LeaseUncertain,
    LockError,
    LockHeld,
    LockUnavailable,
    StaleFencingToken,
)
from locking.fence import advance_fence, claim_fence, insert_fenced
from locking.guard import InstallFenceGuard, unfenced_writes
from locking.keys import FencingToken
from locking.lease import Lease
from locking.lock import FenceLock, prepare_fences
from locking.operation import LeasedAttempt, run_fenced
from locking.outcomes import LeaseState, Outcome
from locking.sending import post_fenced

# The fence, and what an adopter needs beside it: a lease, the runner, the fence's three
# forms and its guard, the sender, the outcomes and the errors to catch. The rest are in
# documented submodules, imported by name as ``redis.asyncio`` is (the API reference).
__all__ = [
    "FenceLock",
    "FencingToken",
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
    "StaleFencingToken",
    "advance_fence",
    "claim_fence",
    "insert_fenced",
    "post_fenced",
    "prepare_fences",
    "run_fenced",
    "unfenced_writes",
]

# Names that were in ``locking.__all__`` up to 3.0.0, and their documented homes since
# 3.1.0. ``from locking import holders`` still works, with a ``DeprecationWarning``; 4.0.0
# removes these.
MOVED = {
    **dict.fromkeys(("AsyncFenceLock", "AsyncLease", "aadvance_fence", "arun_fenced"), "asyncio"),
    **dict.fromkeys(
        (
            "BreakLeaseForm",
            "HolderInfo",
            "HolderState",
            "ViewerScopes",
            "break_lease",
            "holder_of",
            "holders",
        ),
        "operators",
    ),
    **dict.fromkeys(
        (
            "CallVerdict",
            "FencedCall",
            "Receipt",
            "SealedCall",
            "StaleAtReceiver",
            "fenced_receiver",
            "receive_call",
            "seal_call",
            "verify_signature",
        ),
        "receiving",
    ),
    **dict.fromkeys(("CallOutcomeUnknown", "CallRefused"), "sending"),
    **dict.fromkeys(("Attempt", "record_fence_event"), "audit"),
    **dict.fromkeys(("advisory_key", "advisory_lock"), "advisory"),
    **dict.fromkeys(("fence_key", "lock_key", "validate_resource"), "keys"),
    "span": "tracing",
}


def __getattr__(name: str) -> object:
    if name not in MOVED:
        raise AttributeError(f"module 'locking' has no attribute {name!r}")
    home = f"locking.{MOVED[name]}"
    warnings.warn(
        f"locking.{name} moved to {home}.{name} in 3.1.0: import it from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
