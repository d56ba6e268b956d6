"""The invoice workflow (issue 38, items 1 and 2): recording, the duplicate rules, approvals
by the association's threshold, the compare-and-swap on what the approver saw, an amount
changed after an approval, rejecting and voiding, and tenancy held by the database."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from hoa.models import AccessDenial
from tests.invoices_support import (
    AMOUNT,
    LARGE,
    PDF,
    approve,
    assignment_of,
    due_on,
    issued_on,
    pdf_upload,
    record,
    state_of,
    timeline,
)
from tests.vendors_support import WAIT, Worker, active_vendor
from vendors import invoices
from vendors.exceptions import (
    DuplicateInvoiceNumber,
    InvoiceChanged,
    InvoiceNotAllowed,
    InvoiceRefused,
    InvoiceRule,
    PaymentSent,
)
from vendors.models import ApprovalPolicy, Invoice, InvoiceApproval, InvoiceDocument, InvoiceEvent

pytestmark = pytest.mark.django_db

Status = Invoice.Status


def refused_rule(excinfo) -> InvoiceRule:
    return excinfo.value.rule


# -- recording --------------------------------------------------------------------------------


def test_a_recorded_invoice_is_received_with_who_recorded_it_on_its_timeline(assignment, alice):
    invoice = record(assignment, alice, pdf=invoices.read_pdf(pdf_upload()))

    assert (invoice.status, invoice.version, invoice.amount) == (Status.RECEIVED, 1, AMOUNT)
    assert (invoice.organization, invoice.vendor) == (
        assignment.complaint.organization,
        assignment.vendor,
    )
    assert invoice.recorded_by == alice
    assert timeline(invoice) == [("recorded", "alice", "", "received", "")]
    document = InvoiceDocument.objects.get(invoice=invoice)
    assert (bytes(document.content), document.size, document.filename) == (
        PDF,
        len(PDF),
        "invoice.pdf",
    )


def test_the_same_vendors_number_twice_in_one_association_is_refused(
    assignment, alice, maple, oak, pipe, green
):
    first = record(assignment, alice, number="INV-7")
    for number in ("INV-7", " inv-7 "):
        with pytest.raises(DuplicateInvoiceNumber) as refused:
            record(assignment, alice, number=number, amount=Decimal("99.00"))
        assert refused.value.existing == first
        assert str(refused.value) == (
            f"Pipe Pros's invoice {number.strip()} is already recorded (invoice #{first.pk}, "
            "Received); nothing was saved."
        )
    assert Invoice.objects.count() == 1

    # Another vendor's number, or the same vendor's in another association, is its own.
    record(assignment_of(maple, green), alice, number="INV-7")
    oak_vendor_contract = active_vendor("Oak Pipes", oak)
    mallory_side = assignment_of(oak, oak_vendor_contract)
    assert Invoice.objects.create(
        organization=oak,
        assignment=mallory_side,
        vendor=oak_vendor_contract,
        number="INV-7",
        amount=AMOUNT,
        issued_on=issued_on(),
        due_on=due_on(),
    )
    # Voiding an invoice recorded by mistake frees its number.
    invoices.void_invoice(invoice=first, seen=1, reason="Entered twice", actor=alice)
    assert record(assignment, alice, number="INV-7").status == Status.RECEIVED


def test_the_database_refuses_a_second_live_invoice_number_whatever_wrote_it(assignment, alice):
    record(assignment, alice, number="A-1")
    with pytest.raises(IntegrityError, match="one_invoice_number_per_vendor"), transaction.atomic():
        Invoice.objects.create(
            organization=assignment.complaint.organization,
            assignment=assignment,
            vendor=assignment.vendor,
            number="a-1",
            amount=AMOUNT,
            issued_on=issued_on(),
            due_on=due_on(),
        )


@pytest.mark.django_db(transaction=True)
def test_two_staff_recording_one_number_at_once_one_is_refused_by_the_database(
    assignment, alice, bob
):
    """The first insert holds its transaction open (a hold point) while the second checks
    the number, finds nothing committed, and inserts: PostgreSQL makes it wait on the unique
    index, then refuses it once the first commits; the service answers with the refusal."""
    recorded, may_commit = threading.Event(), threading.Event()

    def first():
        with transaction.atomic():
            invoice = record(assignment, alice, number="RACE-1")
            recorded.set()
            assert may_commit.wait(WAIT)
        return invoice

    holder = Worker(first, name="first")
    holder.start()
    assert recorded.wait(WAIT)
    second = Worker(lambda: record(assignment, bob, number="RACE-1"), name="second")
    second.start()
    wait_for_a_lock_wait(exclude=connection)
    may_commit.set()
    won, lost = holder.outcome(), second.outcome()

    assert isinstance(won, Invoice)
    assert isinstance(lost, DuplicateInvoiceNumber)
    assert lost.existing.pk == won.pk
    assert list(Invoice.objects.values_list("number", "recorded_by__username")) == [
        ("RACE-1", "alice")
    ]


def wait_for_a_lock_wait(*, exclude) -> None:
    """Until a backend of the test database waits on a lock (the second insert)."""
    from tests.harness.waiting import wait_until

    def waiting():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0]

    wait_until(waiting, what="the second insert to wait on the first's row")


@pytest.mark.parametrize(
    ("values", "rule"),
    [
        ({"number": "   "}, InvoiceRule.NUMBER_REQUIRED),
        ({"number": "N" * 65}, InvoiceRule.NUMBER_TOO_LONG),
        ({"amount": Decimal("0.00")}, InvoiceRule.AMOUNT_NOT_POSITIVE),
        ({"amount": Decimal("-5")}, InvoiceRule.AMOUNT_NOT_POSITIVE),
        ({"amount": Decimal("10.005")}, InvoiceRule.AMOUNT_CENTS),
        ({"amount": Decimal("10000000000.00")}, InvoiceRule.AMOUNT_TOO_LARGE),
        ({"due_on": timezone.localdate() - timedelta(days=30)}, InvoiceRule.DUE_BEFORE_ISSUED),
    ],
)
def test_bad_values_are_refused_and_nothing_is_written(assignment, alice, values, rule):
    with pytest.raises(InvoiceRefused) as refused:
        record(assignment, alice, **values)
    assert refused_rule(refused) == rule
    assert refused.value.answer == "bad-request"
    assert not Invoice.objects.exists() and not InvoiceEvent.objects.exists()


def test_a_pdf_is_checked_by_its_content_and_its_size(settings):
    assert invoices.read_pdf(pdf_upload()).content == PDF
    for content in (b"GIF89a...", b"%PDF-1.4 but never ends", b""):
        with pytest.raises(InvoiceRefused) as refused:
            invoices.read_pdf(pdf_upload(content))
        assert refused_rule(refused) == InvoiceRule.NOT_A_PDF
    too_large = PDF[:-6] + b" " * (InvoiceDocument.MAX_BYTES) + b"%%EOF\n"
    with pytest.raises(InvoiceRefused) as refused:
        invoices.read_pdf(pdf_upload(too_large))
    assert str(refused.value) == "The PDF is larger than 10 MB."


def test_only_staff_of_the_association_with_the_permission_record_or_approve(
    assignment, alice, mallory, viewer
):
    for actor in (mallory, viewer):
        with pytest.raises(InvoiceNotAllowed) as refused:
            record(assignment, actor)
        assert str(refused.value) == f"{actor.username} may not record invoices of Maple Court."
    assert not Invoice.objects.exists()
    assert AccessDenial.objects.filter(reason="permission").count() == 2


# -- duplicates -------------------------------------------------------------------------------


def test_same_vendor_amount_and_date_under_another_number_is_flagged_and_needs_a_confirmation(
    assignment, alice, bob
):
    first = record(assignment, alice, number="INV-1")
    second = record(assignment, alice, number="INV-2")  # same vendor, amount and date
    other_amount = record(assignment, alice, number="INV-3", amount=Decimal("251.00"))

    assert (first.possible_duplicate_of, second.possible_duplicate_of) == (None, first)
    assert other_amount.possible_duplicate_of is None
    with pytest.raises(InvoiceRefused) as refused:
        approve(second, bob)
    assert str(refused.value) == (
        f"This invoice has the same vendor, amount and date as invoice #{first.pk} "
        "(number INV-1): confirm that it is not the same bill before approving."
    )
    assert state_of(second)[:2] == (Status.RECEIVED, 1)  # the CAS's bump rolled back

    approved = approve(second, bob, confirm_not_duplicate=True)
    assert (approved.status, approved.duplicate_confirmed_by) == (Status.APPROVED, bob)
    assert [kind for kind, *_ in timeline(second)] == [
        "recorded",
        "duplicate_confirmed",
        "approved",
    ]


# -- approvals --------------------------------------------------------------------------------


def test_up_to_the_threshold_one_approval_approves(assignment, alice, bob, maple):
    ApprovalPolicy.objects.create(organization=maple, approval_threshold=AMOUNT)
    invoice = record(assignment, alice)  # exactly the threshold: not above it
    approved = approve(invoice, bob)

    assert state_of(approved) == (Status.APPROVED, 2, AMOUNT, ["bob"], 2)
    assert timeline(approved)[-1] == ("approved", "bob", "received", "approved", "")


RECORDER_MAY_NOT = (
    "You recorded this invoice, and this association's rule is that the person who records "
    "an invoice may not approve it: the approval must come from someone else."
)


@pytest.mark.parametrize("amount", [AMOUNT, LARGE])
def test_by_default_the_recorder_may_not_approve_at_any_amount(assignment, alice, bob, amount):
    """Separation of duties: below the threshold too, one person does not record and
    approve the same invoice (issue 47, item 2)."""
    invoice = record(assignment, alice, amount=amount)
    with pytest.raises(InvoiceRefused) as refused:
        approve(invoice, alice)

    assert refused_rule(refused) == InvoiceRule.RECORDER_MAY_NOT_APPROVE
    assert str(refused.value) == RECORDER_MAY_NOT
    assert state_of(invoice) == (Status.RECEIVED, 1, amount, [], 1)
    assert approve(invoice, bob).approvals.count() == 1


def test_an_association_that_allows_it_lets_the_recorder_give_the_only_approval(
    assignment, alice, maple
):
    ApprovalPolicy.objects.create(organization=maple, recorder_may_approve=True)
    approved = approve(record(assignment, alice), alice)

    assert state_of(approved) == (Status.APPROVED, 2, AMOUNT, ["alice"], 2)


def test_above_the_threshold_two_different_people_neither_the_recorder(
    assignment, alice, bob, carol
):
    invoice = record(assignment, alice, amount=LARGE)  # the default threshold is 1,000
    once = approve(invoice, bob)
    assert state_of(once) == (Status.RECEIVED, 2, LARGE, ["bob"], 2)
    assert timeline(once)[-1] == ("approved", "bob", "", "", "")

    with pytest.raises(InvoiceRefused) as twice:
        approve(invoice, bob)
    assert refused_rule(twice) == InvoiceRule.ALREADY_APPROVED_BY_YOU
    with pytest.raises(InvoiceRefused) as recorder:
        approve(invoice, alice)
    assert str(recorder.value) == RECORDER_MAY_NOT
    assert state_of(invoice) == (Status.RECEIVED, 2, LARGE, ["bob"], 2)

    approved = approve(invoice, carol)
    assert state_of(approved) == (Status.APPROVED, 3, LARGE, ["bob", "carol"], 3)


def test_where_the_association_allows_it_the_recorder_approves_first_never_second(
    assignment, alice, bob, carol, maple
):
    ApprovalPolicy.objects.create(organization=maple, recorder_may_approve=True)
    first = record(assignment, alice, amount=LARGE)
    approve(first, bob)
    with pytest.raises(InvoiceRefused) as second:
        approve(first, alice)
    assert str(second.value) == (
        "You recorded this invoice, so the second approval must come from someone else."
    )

    other = Decimal("4900.00")  # another bill, not a possible duplicate of the first
    mine_first = approve(record(assignment, alice, number="INV-101", amount=other), alice)
    approved = approve(mine_first, carol)
    assert state_of(approved) == (Status.APPROVED, 3, other, ["alice", "carol"], 3)


def test_the_database_holds_one_standing_approval_per_person(assignment, alice, bob):
    invoice = approve(record(assignment, alice, amount=LARGE), bob)
    with (
        pytest.raises(IntegrityError, match="one_standing_approval_per_person"),
        transaction.atomic(),
    ):
        InvoiceApproval.objects.create(invoice=invoice, approver=bob, amount=LARGE)


def test_an_approval_of_a_version_the_approver_did_not_see_is_refused(assignment, alice, bob):
    invoice = record(assignment, alice)
    seen = invoice.version
    invoices.change_amount(
        invoice=invoice, seen=seen, amount=Decimal("300.00"), reason="Typo", actor=alice
    )
    with pytest.raises(InvoiceChanged) as refused:
        invoices.approve_invoice(invoice=invoice, seen=seen, actor=bob)

    assert refused.value.answer == "overtaken"
    assert str(refused.value) == (
        f"Invoice #{invoice.pk} changed since you looked: it is now received, for $300.00; "
        "nothing was saved. Look at it again and decide."
    )
    assert state_of(invoice) == (Status.RECEIVED, 2, Decimal("300.00"), [], 2)


@pytest.mark.django_db(transaction=True)
def test_two_approvers_who_saw_the_same_version_at_once_only_one_approval_is_written(
    assignment, alice, bob, carol
):
    invoice = record(assignment, alice, amount=LARGE)
    barrier = threading.Barrier(2)
    workers = [
        Worker(
            lambda actor=actor: invoices.approve_invoice(invoice=invoice, seen=1, actor=actor),
            barrier=barrier,
            name=actor.username,
        )
        for actor in (bob, carol)
    ]
    for worker in workers:
        worker.start()
    outcomes = [worker.outcome() for worker in workers]

    assert sorted(type(outcome).__name__ for outcome in outcomes) == [
        "InvoiceChange",
        "InvoiceChanged",
    ]
    [won] = [o for o in outcomes if isinstance(o, invoices.InvoiceChange)]
    assert state_of(invoice) == (Status.RECEIVED, 2, LARGE, [won.event.actor_label], 2)


def test_changing_the_amount_voids_the_approvals_and_asks_for_them_again(
    assignment, alice, bob, carol
):
    invoice = approve(approve(record(assignment, alice, amount=LARGE), bob), carol)
    assert invoice.status == Status.APPROVED

    invoices.change_amount(
        invoice=invoice, seen=3, amount=Decimal("4900.00"), reason="Extra part", actor=alice
    )

    assert state_of(invoice) == (Status.RECEIVED, 4, Decimal("4900.00"), [], 4)
    voided = InvoiceApproval.objects.filter(invoice=invoice, voided_at__isnull=False)
    assert sorted(voided.values_list("approver__username", "amount")) == [
        ("bob", LARGE),
        ("carol", LARGE),
    ]
    change = InvoiceEvent.objects.filter(invoice=invoice).order_by("at", "pk").last()
    assert (change.kind, change.from_status, change.to_status, change.note) == (
        "amount_changed",
        "approved",
        "received",
        "Extra part",
    )
    assert (change.amount_before, change.amount_after) == (LARGE, Decimal("4900.00"))
    # Approved anew, by the same two people.
    assert approve(approve(invoice, bob), carol).status == Status.APPROVED


def test_the_amount_change_says_why_and_must_change_something(assignment, alice):
    invoice = record(assignment, alice)
    with pytest.raises(InvoiceRefused) as no_reason:
        invoices.change_amount(
            invoice=invoice, seen=1, amount=Decimal("1.00"), reason=" ", actor=alice
        )
    assert str(no_reason.value) == "Say why the amount changes."
    with pytest.raises(InvoiceRefused) as same:
        invoices.change_amount(invoice=invoice, seen=1, amount=AMOUNT, reason="x", actor=alice)
    assert str(same.value) == "The invoice is already for $250.00."
    assert state_of(invoice) == (Status.RECEIVED, 1, AMOUNT, [], 1)


# -- rejecting, voiding, final states -----------------------------------------------------------


@pytest.mark.parametrize("close", ["reject", "void"])
def test_rejecting_or_voiding_needs_a_reason_and_is_final(assignment, alice, bob, close):
    invoice = approve(record(assignment, alice), bob)
    act = invoices.reject_invoice if close == "reject" else invoices.void_invoice
    with pytest.raises(InvoiceRefused) as no_reason:
        act(invoice=invoice, seen=2, reason="", actor=alice)
    assert refused_rule(no_reason) == InvoiceRule.SAY_WHY

    act(invoice=invoice, seen=2, reason="Work not done", actor=alice)
    status = Status.REJECTED if close == "reject" else Status.VOID
    assert state_of(invoice)[:2] == (status, 3)
    kind = "rejected" if close == "reject" else "voided"
    assert timeline(invoice)[-1] == (kind, "alice", "approved", status, "Work not done")

    for attempt in (
        lambda: invoices.approve_invoice(invoice=invoice, seen=3, actor=bob),
        lambda: invoices.void_invoice(invoice=invoice, seen=3, reason="again", actor=alice),
        lambda: invoices.change_amount(
            invoice=invoice, seen=3, amount=Decimal("1.00"), reason="x", actor=alice
        ),
    ):
        with pytest.raises(InvoiceRefused) as final:
            attempt()
        assert refused_rule(final) == InvoiceRule.NOT_FROM_HERE
    assert state_of(invoice)[:2] == (status, 3)


def test_a_claimed_invoice_can_be_neither_changed_nor_voided(assignment, alice, bob):
    """A payment was sent for it: the payment service may have paid it."""
    invoice = approve(record(assignment, alice), bob)
    Invoice.objects.filter(pk=invoice.pk).update(payment_claim=7, version=3)

    for attempt in (
        lambda: invoices.void_invoice(invoice=invoice, seen=3, reason="Oops", actor=alice),
        lambda: invoices.reject_invoice(invoice=invoice, seen=2, reason="Oops", actor=alice),
        lambda: invoices.change_amount(
            invoice=invoice, seen=3, amount=Decimal("1.00"), reason="x", actor=alice
        ),
    ):
        with pytest.raises(PaymentSent) as refused:
            attempt()
        assert refused.value.answer == "overtaken"
    assert state_of(invoice) == (Status.APPROVED, 3, AMOUNT, ["bob"], 2)


def test_the_database_keeps_a_claim_to_approved_or_paid_invoices(assignment, alice):
    invoice = record(assignment, alice)
    with (
        pytest.raises(IntegrityError, match="invoice_claimed_only_when_approved"),
        transaction.atomic(),
    ):
        Invoice.objects.filter(pk=invoice.pk).update(payment_claim=1)


# -- tenancy held by the database -----------------------------------------------------------------


def test_an_invoice_bills_an_assignment_of_its_own_association_and_vendor(
    assignment, maple, oak, green
):
    values = {"number": "X", "amount": AMOUNT, "issued_on": issued_on(), "due_on": due_on()}
    with pytest.raises(IntegrityError, match="another association"), transaction.atomic():
        Invoice.objects.create(
            organization=oak, assignment=assignment, vendor=assignment.vendor, **values
        )
    with (
        pytest.raises(IntegrityError, match="invoice_bills_an_assignment_of_its_vendor"),
        transaction.atomic(),
    ):
        Invoice.objects.create(organization=maple, assignment=assignment, vendor=green, **values)
    invoice = Invoice.objects.create(
        organization=maple, assignment=assignment, vendor=assignment.vendor, **values
    )
    for change in ({"organization": oak}, {"vendor": green}):
        with pytest.raises(IntegrityError, match="cannot move"), transaction.atomic():
            Invoice.objects.filter(pk=invoice.pk).update(**change)
    assert Invoice.objects.get(pk=invoice.pk).organization == maple
