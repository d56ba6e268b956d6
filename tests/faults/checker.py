"""The history checker: compare what every client was told with what the database holds.

For each resource a history touched it checks:

Charges (one run per organization and month)
  - complete or nothing: a completed run has exactly one charge per unit and totals that
    match; a pending (or missing) run has no charges at all;
  - at most one client was told "generated" (others may be told "already generated");
  - every success is in the database: a client told "generated" or "already generated"
    finds a completed run, completed before its answer; the "generated" one wrote it
    (``completed_by`` is its user, ``completed_at`` inside its request);
  - every refusal left nothing: the run's writer is a client that was told "generated"
    or got no answer, never one told busy, stale, unavailable or failed;
  - tokens never go backwards: ``last_fence_token`` is at least every token the audit
    recorded as committed, and the billing service accepted a call with each of them;
  - one billing record per run, whatever order the calls arrived in: the billing
    stand-in (locking's receiver) holds exactly one record for a completed run's key,
    billing the run's charge count and total.

Vendor assignment (one complaint; a close may end the active row, and a row after a
closed-ended one is a first assignment again, not a replacement)
  - committed writes are totally ordered by token: assignment rows in insertion order
    carry strictly increasing tokens, the complaint's fence is at least the highest;
  - never two active vendors at once: at most one active row, only the newest may be
    active, and each replaced row was deactivated no later than its successor started;
  - every success is in the database: a client told "assigned" has its own row (its
    user, its vendor, inside its request); one told "already the vendor" saw a row of that
    vendor that was active during its request;
  - every refusal left nothing: every row belongs to a client told "assigned" (or one
    that got no answer); a row that replaced another came from a reassign request;
  - every row's token reached the dispatch service, and was accepted, before the row was
    written.

The complaint's rules (one complaint that assignments and status changes both reached)
  - at most one active assignment, and none on a closed complaint;
  - assigned or in progress means an active vendor: after every status event that moved
    it there, and now;
  - closed means nothing was assigned after ``closed_at``: no row assigned while the
    complaint was closed, and every row active at a close was ended by it;
  - one timeline event per committed change, in commit order: each status change a client
    was told was done has exactly one event (its user, from the status its page showed),
    each first assignment of an open complaint one (open to assigned, at its time), every
    event belongs to one of those or to a request with no clear answer, and ordering the
    events by their time is ordering them by their ids (taken under the row lock).

Vendor payment (one invoice)
  - money leaves once: the payment service paid the invoice's key at most once (its first
    accepted call; a replacement pays nothing), and at most one payment is recorded;
  - the invoice is paid exactly when a payment is recorded, and a recorded payment is one
    the service made, under a token the service accepted;
  - a void invoice was never sent for payment;
  - every success is in the database (a client told "paid" or "already paid" finds the
    payment, recorded before its answer; at most one was told "paid", and it wrote it);
    a client told the invoice is void finds it void, and a void one had a void told so.

The stand-in (locking's receiver)
  - kept, per key, the highest token it accepted: its record holds the largest token
    answered 2xx, and every call it refused as stale (409) carried a lower one.

Timestamps the app writes (``timezone.now()`` in the worker) are compared with the
client's wall clock on the same machine; ``SLACK`` absorbs rounding only.
"""

from collections import defaultdict
from datetime import date
from decimal import Decimal
from itertools import pairwise

from tests.faults.clients import Op

SLACK = 0.2  # seconds
# Outcomes a client cannot know: the write may be in the database or not (Jepsen's info).
UNKNOWN = ("no_answer", "error", "indeterminate")
# Told it succeeded: done, already done, or one of the two (its message was not readable).
SUCCESS = ("done", "already_done", "succeeded")
# May have written: told done, a success of unknown kind, or no clear answer.
WRITERS = ("done", "succeeded", *UNKNOWN)
# The stand-in's endpoint of billing calls (tests/faults/stack.py): its receiver's scope.
BILLING_SCOPE = "billing"  # the stand-in receives /billing as the endpoint "billing"


def check_history(ops: list[Op], *, received: list, units: dict[int, int]) -> list[str]:
    """Return one line per invariant violation (empty: the history is consistent).

    ``received`` is the stand-in's list of external calls; ``units`` maps organization id
    to its number of units.
    """
    by_resource: dict[str, list[Op]] = defaultdict(list)
    by_complaint: dict[int, list[Op]] = defaultdict(list)
    for op in ops:
        if op.kind in ("charges", "assign", "pay", "void"):
            by_resource[op.resource].append(op)
        if op.kind in ("assign", "status"):
            by_complaint[op.complaint].append(op)
    calls = _calls_by_key(received)
    violations: list[str] = _check_receiver(received)
    for resource, resource_ops in sorted(by_resource.items()):
        first = resource_ops[0]
        if first.kind == "charges":
            found = _check_charges(first.org_id, first.month, resource_ops, calls, units)
        elif first.kind in ("pay", "void"):
            found = _check_payment(first.invoice, resource_ops, received, calls)
        else:
            found = _check_assignment(first.complaint, resource_ops, calls)
        violations += [f"{resource}: {line}" for line in found]
    for complaint_id, complaint_ops in sorted(by_complaint.items()):
        found = _check_complaint_rules(complaint_id, complaint_ops)
        violations += [f"complaint {complaint_id}: {line}" for line in found]
    return violations


def _calls_by_key(received: list) -> dict[str, set[int]]:
    """The tokens the stand-in accepted (answered 2xx), per idempotency key."""
    calls: dict[str, set[int]] = defaultdict(set)
    for request in received:
        try:
            if request.accepted:
                calls[request.idempotency_key].add(request.token)
        except (KeyError, ValueError):
            continue
    return calls


def _check_receiver(received: list) -> list[str]:
    """Per endpoint and key: the record holds the highest token accepted; refusals as stale
    carried tokens below what the key (or, for dispatch, its complaint) had accepted. Read
    from the records, not from the order the answers were listed in (two answers may be
    listed in another order than they were decided)."""
    from locking.models import ReceivedCall, ReceivedFence
    from tests.harness.http import endpoint_of, fenced_resource

    accepted: dict[tuple[str, str], list[int]] = defaultdict(list)
    stale: dict[tuple[str, str], list[int]] = defaultdict(list)
    for request in received:
        if request.verdict in ("accepted", "replaced", "replayed"):
            accepted[endpoint_of(request.path), request.idempotency_key].append(request.token)
        elif request.verdict == "stale":
            stale[endpoint_of(request.path), request.idempotency_key].append(request.token)
    problems = []
    for scope, key in sorted(accepted.keys() | stale.keys()):
        record = ReceivedCall.objects.filter(scope=scope, idempotency_key=key).first()
        kept = record.token if record else None
        tokens = accepted.get((scope, key))
        if tokens and kept != max(tokens):
            problems.append(
                f"{key}: the stand-in accepted tokens {sorted(tokens)} at {scope} but its "
                f"record holds {kept}: a lower token replaced a higher one"
            )
        resource = fenced_resource(key)
        fence = ReceivedFence.objects.filter(scope=scope, resource=resource).first()
        limit = max(kept or 0, fence.token if resource and fence else 0)
        higher = sorted(token for token in stale.get((scope, key), []) if token >= limit)
        if higher:
            problems.append(
                f"{key}: the stand-in refused tokens {higher} as stale at {scope}, "
                f"though nothing higher was accepted (highest {limit})"
            )
    return problems


def _in_window(moment: float, op: Op) -> bool:
    end = float("inf") if op.verdict in UNKNOWN else op.ended
    return op.started - SLACK <= moment <= end + SLACK


def _month(label: str) -> date:
    year, month = label.split("-")
    return date(int(year), int(month), 1)


# -- charges ---------------------------------------------------------------------------------


def _check_charges(org_id, month, ops, calls, units) -> list[str]:
    from charges.models import MonthlyCharge, MonthlyChargeRun
    from locking.models import FenceEvent

    problems = []
    run = MonthlyChargeRun.objects.filter(organization_id=org_id, month=_month(month)).first()
    charges = list(
        MonthlyCharge.objects.filter(run=run).values_list("unit_id", "amount") if run else []
    )
    completed = run is not None and run.is_completed
    if completed:
        unit_ids = [unit for unit, _ in charges]
        total = sum((amount for _, amount in charges), Decimal("0"))
        if len(charges) != units[org_id] or len(set(unit_ids)) != len(unit_ids):
            problems.append(
                f"completed run has {len(charges)} charges for {len(set(unit_ids))} units, "
                f"expected one for each of {units[org_id]}"
            )
        if run.charge_count != len(charges) or run.total != total:
            problems.append(
                f"run totals ({run.charge_count}, {run.total}) do not match its charges "
                f"({len(charges)}, {total})"
            )
    elif charges:
        problems.append(f"{len(charges)} charges without a completed run (half-written)")

    done = [op for op in ops if op.verdict == "done"]
    if len(done) > 1:
        problems.append(
            "more than one client was told it generated the run: "
            + ", ".join(f"{op.client or op.user} ({op.via})" for op in done)
        )
    for op in ops:
        if op.verdict not in SUCCESS:
            continue
        if not completed:
            problems.append(f"{op.user} was told {op.verdict} but the run is not completed")
        elif run.completed_at.timestamp() > op.ended + SLACK:
            problems.append(f"{op.user} was told {op.verdict} before the run was completed")
    if completed:
        writer = run.completed_by.split(" ", 1)[0]
        moment = run.completed_at.timestamp()
        candidates = [op for op in ops if op.user == writer and _in_window(moment, op)]
        if not candidates:
            problems.append(f"the run was completed by {run.completed_by!r}, whom no client was")
        elif not any(op.verdict in WRITERS for op in candidates):
            told = ", ".join(sorted({op.verdict for op in candidates}))
            problems.append(f"{writer} was told {told}, yet its write is in the database")
        for op in done:
            if op.user != writer:
                problems.append(f"{op.user} was told it generated the run; {writer} did")

    resource = f"monthly-charges:org:{org_id}:{month}"
    events = FenceEvent.objects.filter(resource=resource, outcome="committed")
    committed_tokens = [token for token in events.values_list("token", flat=True) if token]
    if run is not None and committed_tokens and run.last_fence_token < max(committed_tokens):
        problems.append(
            f"last_fence_token {run.last_fence_token} went below committed token "
            f"{max(committed_tokens)}"
        )
    key = f"monthly-charges:{org_id}:{month}"
    for token in committed_tokens:
        if calls and token not in calls.get(key, set()):
            problems.append(f"token {token} committed without a billing call carrying it")
    if completed and calls:
        problems += _billing_records(run, key)
    return problems


def _billing_records(run, key: str) -> list[str]:
    """One billing record per completed run, billing what the run wrote."""
    from locking.models import ReceivedCall

    records = list(ReceivedCall.objects.filter(scope=BILLING_SCOPE, idempotency_key=key))
    if len(records) != 1:
        return [f"{len(records)} billing records for a completed run (expected one)"]
    billed = records[0].payload
    if (billed["charge_count"], Decimal(billed["total"])) != (run.charge_count, run.total):
        return [
            f"the billing record (token {records[0].token}) bills {billed['charge_count']} "
            f"charges, {billed['total']}; the run has {run.charge_count}, {run.total}"
        ]
    return []


# -- vendor assignment -----------------------------------------------------------------------


def _check_assignment(complaint_id, ops, calls) -> list[str]:
    from hoa.models import Complaint
    from vendors.models import VendorAssignment

    problems = []
    rows = list(
        VendorAssignment.objects.filter(complaint_id=complaint_id)
        .select_related("assigned_by")
        .order_by("pk")
    )
    fence = Complaint.objects.values_list("last_fence_token", flat=True).get(pk=complaint_id)
    tokens = [row.fence_token for row in rows]
    if any(later <= earlier for earlier, later in pairwise(tokens)):
        problems.append(f"assignment tokens are not increasing in commit order: {tokens}")
    if tokens and fence < max(tokens):
        problems.append(f"complaint fence {fence} is below assignment token {max(tokens)}")
    active = [row for row in rows if row.active]
    if len(active) > 1:
        problems.append(f"{len(active)} active assignments")
    if active and active[-1] is not rows[-1]:
        problems.append("an older assignment is active while a newer one exists")
    for earlier, later in pairwise(rows):
        if earlier.deactivated_at is None or earlier.deactivated_at > later.assigned_at:
            problems.append(f"assignment {earlier.pk} was still active when {later.pk} was written")

    claimed: set[int] = set()
    for index, row in enumerate(rows):
        user = row.assigned_by.username if row.assigned_by else ""
        moment = row.assigned_at.timestamp()
        candidates = [
            op
            for op in ops
            if op.user == user and op.vendor == row.vendor_id and _in_window(moment, op)
        ]
        # Each request writes at most one row. Among those that may have written this one,
        # one that could have (a reassign request, for a row that replaced another) comes
        # first, then by what it was told: "done", then a success whose message was not
        # read, then no clear answer. Otherwise an unknown answer of an earlier, plain
        # request (its window stays open) would be blamed for the reassignment's row.
        # A row after one its close ended replaced nothing: a first assignment again.
        replaced = index > 0 and rows[index - 1].ended_because != "closed"
        writers = sorted(
            (op for op in candidates if op.verdict in WRITERS and id(op) not in claimed),
            key=lambda op: (replaced and not op.reassign, WRITERS.index(op.verdict)),
        )
        if not candidates:
            problems.append(f"assignment {row.pk} (token {row.fence_token}) has no client")
            continue
        if not writers:
            told = ", ".join(sorted({op.verdict for op in candidates}))
            problems.append(
                f"{user} was told {told}, yet assignment {row.pk} (token {row.fence_token}) "
                "is in the database"
            )
            continue
        writer = writers[0]
        claimed.add(id(writer))
        if replaced and not writer.reassign:
            problems.append(f"assignment {row.pk} replaced another without a reassign request")
        prefix = f"vendor-assignment:{complaint_id}:{row.vendor_id}:"
        sent = {token for key, found in calls.items() if key.startswith(prefix) for token in found}
        if calls and row.fence_token not in sent:
            problems.append(
                f"assignment {row.pk} committed token {row.fence_token} without a dispatch "
                "call carrying it"
            )

    for op in ops:
        if op.verdict == "done" and id(op) not in claimed:
            problems.append(f"{op.user} was told vendor {op.vendor} is assigned; no row of it")
        unread = op.verdict == "succeeded" and id(op) not in claimed
        if (op.verdict == "already_done" or unread) and not any(
            row.vendor_id == op.vendor
            and row.assigned_at.timestamp() <= op.ended + SLACK
            and (row.deactivated_at is None or row.deactivated_at.timestamp() >= op.started - SLACK)
            for row in rows
        ):
            problems.append(
                f"{op.user} was told vendor {op.vendor} already handles it; it never did "
                "during that request"
            )
    return problems


# -- the complaint's rules ---------------------------------------------------------------------


def _check_complaint_rules(complaint_id: int, ops: list[Op]) -> list[str]:
    """The rules between the complaint's operations (the module docstring's list), from its
    rows and its timeline."""
    from hoa.models import Complaint, ComplaintEvent
    from vendors.models import VendorAssignment

    complaint = Complaint.objects.get(pk=complaint_id)
    rows = list(VendorAssignment.objects.filter(complaint_id=complaint_id).order_by("pk"))
    events = list(
        ComplaintEvent.objects.filter(complaint_id=complaint_id, kind="status_changed")
        .select_related("actor")
        .order_by("pk")
    )
    problems = []
    active = [row for row in rows if row.active]
    if len(active) > 1:
        problems.append(f"{len(active)} active assignments")
    if complaint.status == "closed" and active:
        problems.append(f"closed with assignment {active[0].pk} active")
    if complaint.status in ("assigned", "in_progress") and not active:
        problems.append(f"{complaint.status} without an active vendor")

    def active_at(moment) -> list:
        return [
            row
            for row in rows
            if row.assigned_at <= moment
            and (row.deactivated_at is None or row.deactivated_at > moment)
        ]

    closed_at = None  # while the timeline has it closed: since when
    for event in events:
        if event.to_status in ("assigned", "in_progress") and not active_at(event.at):
            problems.append(f"event {event.pk} made it {event.to_status} with no vendor active")
        if event.to_status == "closed":
            closed_at = event.at
            for row in active_at(event.at):
                problems.append(f"assignment {row.pk} stayed active through the close {event.pk}")
        elif closed_at is not None:  # reopened
            made = [row.pk for row in rows if closed_at < row.assigned_at < event.at]
            if made:
                problems.append(f"assignments {made} were made while it was closed")
            closed_at = None
    if closed_at is not None:
        late = [row.pk for row in rows if row.assigned_at > closed_at]
        if late:
            problems.append(f"assignments {late} were made after closed_at")

    by_time = sorted(events, key=lambda event: (event.at, event.pk))
    if [event.pk for event in by_time] != [event.pk for event in events]:
        problems.append("the timeline's order by time is not the order the events committed in")
    problems += _one_event_per_change(rows, events, [op for op in ops if op.kind == "status"])
    return problems


def _one_event_per_change(rows, events, status_ops: list[Op]) -> list[str]:
    """Every status change a client was told was done has its one event; every event is a
    told change's, a first assignment's (open to assigned, at its time), or an unclear
    request's."""
    problems = []
    assigned_at = {(row.assigned_at, row.assigned_by_id) for row in rows}
    claimed: set[int] = set()
    for event in events:
        if (event.from_status, event.to_status) == ("open", "assigned") and (
            event.at,
            event.actor_id,
        ) in assigned_at:
            continue  # a first assignment's, in its transaction
        user = event.actor.username if event.actor else ""
        moment = event.at.timestamp()
        candidates = [
            op
            for op in status_ops
            if op.user == user
            and op.status_from == event.from_status
            and (
                op.status_to == event.to_status
                or (op.status_to, event.to_status) == ("open", "assigned")
            )
            and _in_window(moment, op)
            and id(op) not in claimed
        ]
        writers = sorted(
            (op for op in candidates if op.verdict in WRITERS),
            key=lambda op: WRITERS.index(op.verdict),
        )
        if not writers:
            told = ", ".join(sorted({op.verdict for op in candidates})) or "nothing"
            problems.append(
                f"event {event.pk} ({event.from_status} to {event.to_status} by {user}) has no "
                f"client told it was done (told: {told})"
            )
            continue
        claimed.add(id(writers[0]))
    for op in status_ops:
        if op.verdict in ("done", "succeeded") and id(op) not in claimed:
            problems.append(
                f"{op.user} was told {op.status_from} to {op.status_to} was done; no event of it"
            )
    return problems


# -- vendor payment --------------------------------------------------------------------------


def _check_payment(invoice_id, ops, received, calls) -> list[str]:
    from vendors.models import Invoice, VendorPayment

    problems = []
    invoice = Invoice.objects.get(pk=invoice_id)
    payments = list(VendorPayment.objects.filter(invoice_id=invoice_id))
    key = f"vendor-payment:invoice:{invoice_id}"
    # A key's first accepted call is the one the stand-in paid; a replacement pays nothing.
    paid_calls = [r for r in received if _key_of(r) == key and r.verdict == "accepted"]
    if len(paid_calls) > 1:
        problems.append(f"the payment service paid {len(paid_calls)} times")
    if len(payments) > 1:
        problems.append(f"{len(payments)} payments recorded")
    if (invoice.status == Invoice.Status.PAID) != bool(payments):
        problems.append(f"the invoice is {invoice.status} with {len(payments)} payments recorded")
    if invoice.status == Invoice.Status.VOID and (paid_calls or invoice.payment_claim):
        problems.append("a void invoice was sent for payment")
    if payments and received and not paid_calls:
        problems.append("a payment was recorded that the payment service never made")
    payment = payments[0] if payments else None
    if payment is not None and calls and payment.fence_token not in calls.get(key, set()):
        problems.append(
            f"the payment was recorded under token {payment.fence_token}, which the service "
            "never accepted"
        )

    pays = [op for op in ops if op.kind == "pay"]
    voids = [op for op in ops if op.kind == "void"]
    done = [op for op in pays if op.verdict == "done"]
    if len(done) > 1:
        problems.append(
            "more than one client was told it paid the invoice: "
            + ", ".join(f"{op.client or op.user} ({op.via})" for op in done)
        )
    for op in pays:
        if op.verdict not in SUCCESS:
            continue
        if payment is None:
            problems.append(f"{op.user} was told {op.verdict} but nothing is paid")
        elif payment.paid_at.timestamp() > op.ended + SLACK:
            problems.append(f"{op.user} was told {op.verdict} before the payment was recorded")
    if payment is not None:
        writer = payment.actor_label.split(" ", 1)[0]
        moment = payment.paid_at.timestamp()
        candidates = [op for op in pays if op.user == writer and _in_window(moment, op)]
        if not candidates:
            problems.append(
                f"the payment was recorded by {payment.actor_label!r}, whom no client was"
            )
        elif not any(op.verdict in WRITERS for op in candidates):
            told = ", ".join(sorted({op.verdict for op in candidates}))
            problems.append(f"{writer} was told {told}, yet its payment is in the database")
    voided = [op for op in voids if op.verdict == "done"]
    if voided and invoice.status != Invoice.Status.VOID:
        problems.append(f"{voided[0].user} was told the invoice is void; it is {invoice.status}")
    if invoice.status == Invoice.Status.VOID and not any(op.verdict in WRITERS for op in voids):
        problems.append("the invoice is void, yet no client that voided it was told so")
    return problems


def _key_of(request) -> str:
    try:
        return request.idempotency_key
    except (KeyError, ValueError):
        return ""


def summarize(ops: list[Op]) -> dict[str, int]:
    """Counts of verdicts, for the report table."""
    counts: dict[str, int] = defaultdict(int)
    for op in ops:
        counts[op.verdict] += 1
    return dict(sorted(counts.items()))
