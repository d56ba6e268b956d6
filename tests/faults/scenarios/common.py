"""What the scenarios share: racing operations, stand-in predicates, database facts."""

from tests.faults.clients import Op
from tests.faults.scenario import Scenario

# The tables a worker writes into after its fence UPDATE, and the statements it blocks in.
INSERT_TARGET = {"charges": "charges_monthlycharge", "assign": "vendors_vendorassignment"}
# The statement a holder blocks on when the table of its writes is held (charges: COPY).
INSERT_STATEMENT = {
    "charges": 'COPY "charges_monthlycharge"',
    "assign": 'INSERT INTO "vendors_vendorassignment"',
}
# What a rival waits on behind a holder paused before its commit: its claim on the
# resource's fence record (locking_fenceepoch), whose row the paused holder's fence
# statement locked in its uncommitted transaction. The runner claims before the look and
# the call (hoa/fenced.py, issue 35), so the rival waits there, having called no one.
CLAIM_STATEMENT = 'WITH claim AS (INSERT INTO "locking_fenceepoch"'


def racing_ops(s: Scenario, kind: str):
    """Two operations racing for one fresh resource: the same month, or one complaint with
    two different vendors.

    The first vendor request asks to reassign: if it came through after losing its lease,
    only the fence would stop it from replacing the newer holder's vendor (the state check
    alone would let a reassign through), so these scenarios test the fence itself.
    """
    if kind == "charges":
        first = s.charges()
        return first, s.charges(month=first.month)
    complaint = s.complaint()
    return (
        s.assign(complaint, s.world.vendors[0], reassign=True),
        s.assign(complaint, s.world.vendors[1]),
    )


def external_call_of(op: Op, token: int):
    """A stand-in predicate: the external call ``op`` makes with ``token``."""
    if op.kind == "charges":
        key = f"monthly-charges:{op.org_id}:{op.month}"
        return lambda request: request.idempotency_key == key and request.token == token
    prefix = f"vendor-assignment:{op.complaint}:"
    return lambda request: request.idempotency_key.startswith(prefix) and request.token == token


def stored(op: Op) -> dict:
    """What the database holds for ``op``'s resource, for facts and explicit checks."""
    from charges.models import MonthlyChargeRun
    from hoa.models import Complaint
    from vendors.models import VendorAssignment

    if op.kind == "charges":
        run = MonthlyChargeRun.objects.filter(organization_id=op.org_id, month=f"{op.month}-01")
        run = run.first()
        return {
            "run": run.status if run else None,
            "charges": run.charges.count() if run else 0,
            "fence": run.last_fence_token if run else None,
        }
    return {
        "active": list(
            VendorAssignment.objects.filter(complaint_id=op.complaint, active=True).values_list(
                "vendor_id", "fence_token"
            )
        ),
        "rows": VendorAssignment.objects.filter(complaint_id=op.complaint).count(),
        "fence": Complaint.objects.get(pk=op.complaint).last_fence_token,
    }


def tokens_sent(s: Scenario, op: Op, *, cancellations: bool = False) -> list[int]:
    """The fencing tokens of the external calls the stand-in received for ``op``'s resource:
    the calls themselves, or (``cancellations``) the takings back of calls told in vain."""
    received = [r for r in s.stack.standin.received if r.path.endswith("/cancel") == cancellations]
    if op.kind == "charges":
        key = f"monthly-charges:{op.org_id}:{op.month}"
        return [r.token for r in received if r.idempotency_key == key]
    prefix = f"vendor-assignment:{op.complaint}:"
    return [r.token for r in received if r.idempotency_key.startswith(prefix)]


def billing_records(op: Op) -> list[tuple[int, int]]:
    """The billing stand-in's records for ``op``'s run (locking's receiver keeps one per
    key): (token, replacements) of each; one record per run is what the checker demands."""
    from locking.models import ReceivedCall
    from tests.faults.checker import BILLING_SCOPE

    key = f"monthly-charges:{op.org_id}:{op.month}"
    records = ReceivedCall.objects.filter(scope=BILLING_SCOPE, idempotency_key=key)
    return list(records.values_list("token", "replacements"))
