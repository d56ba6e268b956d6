"""A model-based check of an invoice's money: recorded, approved, paid exactly once (issue 44,
item 6, "the checker reaches money").

Staff members work on a vendor's invoices at once, each in a thread of its own with its own
database connection, and every SQL statement they send waits at a hold point until
Hypothesis lets it through (locking/tests/stepping.py), as in tests/races/test_complaint_model.py:
Hypothesis chooses the interleaving, statement by statement, among recording an invoice,
approving it (one approval up to the association's threshold, two by two people above it;
by default never its recorder, and in an association that allows the recorder to approve,
never second: each example draws which association it is), changing its amount,
rejecting, voiding, paying it (``pay_invoice`` with the version the staff page showed, as
the page does) and settling the outside calls of unknown outcome (``settle_outside_calls``,
in flight like the rest, and as a step of its own when nothing is). Each reads the invoice
as its page would show it first.

The payment service is the real local stand-in (tests/harness/http.py, locking's receiver:
it pays a key once, answers a replay with the same payment, refuses a lower token). What it
answers is a step too: done; refused (422, for a key it has not paid: a service that paid
answers a replay with its payment); or it pays and the answer is lost (an error page, a
closed connection, a timeout, a redirect, half a body: the outcome is unknown). A payer
paused past its lease is overtaken (its lease expired with ``pexpire``), and the vendor's
insurance lapses or is renewed between steps.

After every step, on committed data and on the stand-in's own record of its transfers:

- never more than one transfer per invoice; an invoice is paid iff it has a
  ``VendorPayment``, and then the service made exactly one transfer for it, of the same
  reference and amount;
- a transfer not recorded yet leaves the invoice approved and sent for payment (claimed): it
  cannot be voided, rejected or changed, so a void or rejected invoice was never transferred;
- an approval counts only for the amount approved: an approved or paid invoice's standing
  approvals are all for its amount, as many as its threshold asks, by different people, none
  its recorder (the recorder at most first, where the association allows it); the amount
  paid is the amount approved;
- the invoice's fence never goes down.

At the end of each example (its teardown), with every holder finished and the service
answering again: settle until nothing is left unknown, then the database and the outside
agree: every transfer has its ``VendorPayment``, and every ``VendorPayment`` its transfer.

The first long search found a payment made and never left to record: a payer whose call
was paid, paused past its lease, overtaken by a payer that stopped before its own call (its
page out of date), and refused by the fence, left the invoice claimed with the money out and
nothing to settle. ``test_a_payer_overtaken_by_one_that_never_calls_leaves_its_payment_to_settle``
keeps that history (``Payment.take_back`` now leaves such a payment to the settling job).

``make test`` runs a short search (``MONEY_MODEL_EXAMPLES``, default 15); ``make faults``
runs it longer (``FENCE_MODEL_FAULTS=1``), and a control with the rule "a payment sent is
recorded whatever the vendor's insurance says now" taken back, which must find a violation.
"""

import itertools
import os
from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest
import redis
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, Phase
from hypothesis import settings as search
from hypothesis import strategies as st
from hypothesis.errors import FlakyFailure
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from hoa.answers.refusals import Refusal
from hoa.demo import staff_group
from hoa.jobs.settling import settle_outside_calls
from hoa.models import Organization, OutsideCall, StaffMembership
from locking.conf import setting
from locking.keys import lock_key
from locking.tests.stepping import SEARCH, Holder, Stepping
from tests.harness.http import HttpStub
from tests.invoices_support import assignment_of, due_on, issued_on
from tests.vendors_support import active_vendor
from vendors import invoices, payments
from vendors.approvals import approvals_needed
from vendors.insurance import check_insured, today_of
from vendors.models import (
    ApprovalPolicy,
    Invoice,
    InvoiceApproval,
    Vendor,
    VendorContract,
    VendorPayment,
)
from vendors.operations import payment_resource
from vendors.payment_client import PAYMENT_ENDPOINT, idempotency_key

FAULTS = bool(os.environ.get("FENCE_MODEL_FAULTS"))
EXAMPLES = int(os.environ.get("MONEY_MODEL_EXAMPLES", "200" if FAULTS else "15"))
CONTROL_EXAMPLES = 500
STEPS = 40
MAX_HOLDERS = 3
MAX_INVOICES = 3
SETTLE_PASSES = 5  # the teardown's: a pass that finds a lease held leaves the call unknown
Status = Invoice.Status

SMALL, LARGE = Decimal("250.00"), Decimal("4800.00")  # one approval, two (threshold 1000)
AMOUNTS = (SMALL, LARGE, Decimal("260.00"), Decimal("5000.00"))
STAFF = ("alice", "bob", "carol")  # alice records the first invoice

# What a staff member may be told instead of "done": every refusal of the workflow and of
# the fenced payment (busy, superseded, outcome unknown, changed since the page) is an
# answer, never a failure of the test.
EXPECTED = (Refusal,)

PLANS = (
    "pay", "pay", "pay", "pay", "approve", "approve", "change", "settle", "record",
    "reject", "void",
)  # fmt: skip
OFFERED = {
    "approve": (Status.RECEIVED,),
    "pay": (Status.APPROVED,),
    **dict.fromkeys(("change", "reject", "void"), Invoice.OWED_STATUSES),
}
LOST = ("500", "close", "timeout", "redirect", "partial")  # the stand-in's lose_answer
ANSWERS = ("done", "refused", *LOST)
# Certificates lapse more often than they are renewed in a day's work.
OUTSIDE = (*ANSWERS, "done", "lapse", "lapse", "renew", "settle")
numbers = itertools.count(1)
# What the search reached (each holder's plan and answer, the transfers made, the calls left
# unknown), printed by the tests under -s: a search that never pays checks nothing.
REACHED: Counter = Counter()


class MoneyModel(RuleBasedStateMachine):
    stub: HttpStub  # the payment service, set by the test

    def __init__(self):
        super().__init__()
        self.organization, _ = Organization.objects.get_or_create(
            slug="money-court", defaults={"name": "Money Court"}
        )
        self.staff = {name: _staff(f"money-{name}", self.organization) for name in STAFF}
        self.vendor = _vendor("Money Pipes", self.organization)
        self.assignment = assignment_of(self.organization, self.vendor, title="Money model")
        self.threshold = ApprovalPolicy.threshold_for(self.organization)
        self.redis = redis.Redis.from_url(setting("LOCK_REDIS_URL"))
        self.stepping = Stepping(expected=EXPECTED)
        self.answer = "done"
        self.stub.status_for = self._forced_status
        self.stub.lose_answer = self._lost
        self.highest_fence: dict[int, int] = {}
        self.recorder_may_approve = False  # the association's rule, drawn by two_invoices
        self._insured(True)

    # -- the steps -------------------------------------------------------------------------

    @initialize(answer=st.sampled_from(ANSWERS), recorder_may_approve=st.booleans())
    def two_invoices(self, answer="done", recorder_may_approve=False):
        """alice records two invoices (nothing is in flight yet): one up to the threshold,
        which bob approves, and one above it, received; the payment service answers as
        ``answer`` says until a step changes it. ``recorder_may_approve``: the association's
        rule (by default, the person who records an invoice may not approve it)."""
        self.answer = answer
        self.recorder_may_approve = recorder_may_approve
        ApprovalPolicy.objects.update_or_create(
            organization=self.organization,
            defaults={"recorder_may_approve": recorder_may_approve},
        )
        self._record(self.staff["alice"], SMALL)
        [first] = self._committed()
        invoices.approve_invoice(
            invoice=first, seen=first.version, actor=self.staff["bob"], confirm_not_duplicate=True
        )
        self._record(self.staff["alice"], LARGE)

    @rule(
        plan=st.sampled_from(PLANS),
        who=st.sampled_from(STAFF),
        which=st.integers(min_value=0, max_value=MAX_INVOICES - 1),
        amount=st.sampled_from(AMOUNTS),
        take_over=st.booleans(),
    )
    def start(self, plan, who, which, amount, take_over):
        """A staff member reads an invoice as its page shows it and asks for a change; with
        ``take_over`` the lease of a payment in flight has run out (its payer paused past
        its TTL)."""
        if self.stepping.live() >= MAX_HOLDERS:
            return  # a no-op, not a precondition: see step()
        if plan == "record" and len(self._invoices()) >= MAX_INVOICES:
            plan = "approve"
        if take_over:
            for pk in self._invoices():
                self.redis.pexpire(lock_key(payment_resource(pk)), 0)
        holder = self.stepping.start(plan, self._run)
        # It waits at its first hold point, before _run reads what it is to do.
        holder.drawn = (who, which, amount)

    @rule(
        pick=st.integers(min_value=0, max_value=MAX_HOLDERS - 1),
        statements=st.sampled_from([2, 4, 40]),
    )
    def step(self, pick, statements):
        """The ``pick``-th holder at a hold point sends its next statements: a few, or the
        whole change."""
        if not self.stepping.ready():
            return  # a no-op, not a precondition (test_complaint_model.py says why)
        self.stepping.step(pick, statements)

    @rule(pick=st.integers(min_value=0, max_value=MAX_HOLDERS - 1))
    def step_one(self, pick):
        """The ``pick``-th holder at a hold point sends its next statement (a rule of its
        own: stepping is most of what a search does, one statement at a time where the
        races are)."""
        if not self.stepping.ready():
            return
        self.stepping.step(pick, 1)

    @rule(what=st.sampled_from(OUTSIDE))
    def outside(self, what):
        """Something outside the staff's requests: from now on the payment service answers
        so (done, refused, or it pays and the answer is lost); the vendor's certificate
        lapses (its expiry is in the past) or is renewed; or, with nothing in flight, the
        settling job's pass runs to its end."""
        if what in ANSWERS:
            self.answer = what
        elif what in ("lapse", "renew"):
            self._insured(what == "renew")
        elif not self.stepping.live():
            settle_outside_calls()

    # -- what must hold after every step ------------------------------------------------------

    @invariant()
    def money_leaves_once_and_as_recorded(self):
        transfers = self._transfers()
        for invoice in self._committed():
            made = transfers.get(invoice.pk, [])
            paid = list(VendorPayment.objects.filter(invoice=invoice))
            where = f"invoice {invoice.pk} ({invoice.status}, {invoice.amount})"
            assert len(made) <= 1, f"{where}: {len(made)} transfers {made}"
            assert (invoice.status == Status.PAID) == bool(paid), (
                f"{where}: status against {len(paid)} VendorPayment"
            )
            if paid:
                [payment] = paid
                assert made, f"{where}: paid ({payment.reference}) without a transfer"
                assert (payment.reference, payment.amount) == (
                    made[0].reference,
                    Decimal(made[0].amount),
                ), f"{where}: recorded {payment.reference} {payment.amount}, made {made[0]}"
                assert payment.amount == invoice.amount, f"{where}: paid {payment.amount}"
            elif made:
                assert invoice.status not in (Status.VOID, Status.REJECTED), (
                    f"{where}: transferred ({made[0].reference}, {made[0].amount})"
                )
                assert invoice.status == Status.APPROVED and invoice.is_claimed, (
                    f"{where}: transferred, not recorded, and not held as sent for payment "
                    f"(claim {invoice.payment_claim})"
                )
                assert Decimal(made[0].amount) == invoice.amount, (
                    f"{where}: transferred {made[0].amount}"
                )

    @invariant()
    def an_approval_counts_for_the_amount_approved(self):
        for invoice in self._committed():
            standing = list(
                InvoiceApproval.objects.filter(invoice=invoice, voided_at__isnull=True).order_by(
                    "pk"
                )
            )
            where = f"invoice {invoice.pk} ({invoice.status}, {invoice.amount})"
            stale = [(a.approver_id, a.amount) for a in standing if a.amount != invoice.amount]
            assert not stale, f"{where}: standing approvals of another amount {stale}"
            if invoice.status in (Status.APPROVED, Status.PAID):
                needed = approvals_needed(invoice, self.threshold)
                approvers = [approval.approver_id for approval in standing]
                assert len(set(approvers)) >= needed, f"{where}: approved by {approvers}"
                if not self.recorder_may_approve:
                    assert invoice.recorded_by_id not in approvers, (
                        f"{where}: its recorder approved it ({approvers})"
                    )
                elif needed == 2:
                    assert approvers[1] != invoice.recorded_by_id, (
                        f"{where}: its recorder approved second"
                    )

    @invariant()
    def the_fence_never_goes_down(self):
        for invoice in self._committed():
            highest = self.highest_fence.get(invoice.pk, 0)
            assert invoice.last_fence_token >= highest, (
                f"invoice {invoice.pk}: fence {invoice.last_fence_token} after {highest}"
            )
            self.highest_fence[invoice.pk] = invoice.last_fence_token

    # -- the plans (each in its holder's thread) ------------------------------------------------

    def _run(self, holder: Holder) -> None:
        who, which, amount = holder.drawn
        actor = self.staff[who]
        if holder.plan == "record":
            self._record(actor, amount)
        elif holder.plan == "settle":
            settle_outside_calls()
        else:
            self._change(holder.plan, actor, which, amount)
        holder.outcome = "done"

    def _change(self, plan: str, actor, which: int, amount: Decimal) -> None:
        # The page lists the invoices and offers the change where it applies (pay on an
        # approved one, approve on a received one); it may be out of date by the time the
        # request arrives, which is the point.
        listed = list(
            Invoice.objects.filter(assignment=self.assignment)
            .select_related("organization", "vendor")
            .order_by("pk")
        )
        offered = [invoice for invoice in listed if invoice.status in OFFERED[plan]] or listed
        invoice = offered[which % len(offered)]
        seen = invoice.version
        if plan == "approve":
            invoices.approve_invoice(
                invoice=invoice, seen=seen, actor=actor, confirm_not_duplicate=True
            )
        elif plan == "change":
            invoices.change_amount(
                invoice=invoice, seen=seen, amount=amount, reason="model", actor=actor
            )
        elif plan == "reject":
            invoices.reject_invoice(invoice=invoice, seen=seen, reason="model", actor=actor)
        elif plan == "void":
            invoices.void_invoice(invoice=invoice, seen=seen, reason="model", actor=actor)
        else:
            payments.pay_invoice(invoice=invoice, actor=actor, seen=seen, via="model")

    def _record(self, actor, amount: Decimal) -> None:
        invoices.record_invoice(
            assignment=self.assignment,
            number=f"MONEY-{next(numbers)}",
            amount=amount,
            issued_on=issued_on(),
            due_on=due_on(),
            actor=actor,
        )

    # -- the payment service's answers ----------------------------------------------------------

    def _forced_status(self, request) -> int | None:
        """Refused: 422 for a key the service has not paid (one it paid answers with its
        payment, as the receiver does); otherwise the receiver answers."""
        if self.answer != "refused" or not request.path.endswith(PAYMENT_ENDPOINT):
            return None
        paid = {transfer.idempotency_key for transfer in self.stub.payments}
        return None if request.idempotency_key in paid else 422

    def _lost(self, request) -> str | None:
        return self.answer if self.answer in LOST else None

    # -- reading what is committed --------------------------------------------------------------

    def _invoices(self) -> list[int]:
        return list(
            Invoice.objects.filter(assignment=self.assignment)
            .order_by("pk")
            .values_list("pk", flat=True)
        )

    def _committed(self) -> list[Invoice]:
        return list(Invoice.objects.filter(assignment=self.assignment).order_by("pk"))

    def _transfers(self) -> dict[int, list]:
        """The stand-in's transfers for this example's invoices, by invoice."""
        keys = {idempotency_key(pk): pk for pk in self._invoices()}
        made: dict[int, list] = {}
        for transfer in list(self.stub.payments):
            if transfer.idempotency_key in keys:
                made.setdefault(keys[transfer.idempotency_key], []).append(transfer)
        return made

    def _insured(self, insured: bool) -> None:
        today = today_of(self.organization)
        expires = today + timedelta(days=365) if insured else today - timedelta(days=1)
        VendorContract.objects.filter(vendor=self.vendor, organization=self.organization).update(
            insurance_expires_on=expires
        )

    # -- the end of an example ------------------------------------------------------------------

    def teardown(self):
        try:
            self.stepping.finish()
            for holder in self.stepping.holders:
                REACHED[f"{holder.plan}: {holder.outcome}"] += 1
            REACHED["transfers"] += sum(len(made) for made in self._transfers().values())
            REACHED["left unknown before settling"] += self._unsettled().count()
            self._settle_until_settled()
            self.the_database_and_the_service_agree()
        finally:
            self.redis.close()

    def _settle_until_settled(self) -> None:
        """Every holder has finished; the service answers again: settle what is unknown."""
        self.answer = "done"
        for _ in range(SETTLE_PASSES):
            if not self._unsettled().exists():
                return
            settle_outside_calls()

    def _unsettled(self):
        """This example's payment calls of unknown outcome not settled yet."""
        resources = [payment_resource(pk) for pk in self._invoices()]
        return OutsideCall.objects.unsettled().filter(resource__in=resources)

    def the_database_and_the_service_agree(self) -> None:
        self.money_leaves_once_and_as_recorded()
        unsettled = list(self._unsettled().values_list("resource", "reason"))
        transfers = self._transfers()
        for invoice in self._committed():
            made = transfers.get(invoice.pk, [])
            recorded = VendorPayment.objects.filter(invoice=invoice).exists()
            assert bool(made) == recorded, (
                f"invoice {invoice.pk} ({invoice.status}, claim {invoice.payment_claim}): "
                f"{len(made)} transfer(s), {'a' if recorded else 'no'} VendorPayment, after "
                f"settling ({len(unsettled)} left unknown: {unsettled})"
            )


def _staff(username: str, organization: Organization):
    user, created = get_user_model().objects.get_or_create(
        username=username, defaults={"is_staff": True}
    )
    if created:
        user.groups.add(staff_group())
        StaffMembership.objects.create(user=user, organization=organization)
    return user


def _vendor(name: str, organization: Organization) -> Vendor:
    existing = Vendor.objects.filter(name=name).first()
    return existing if existing is not None else active_vendor(name, organization)


def _search(examples: int, phases) -> search:
    return search(
        max_examples=examples,
        stateful_step_count=STEPS,
        deadline=None,
        phases=phases,  # no shrinking: a replay of threads is close, not exact
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@pytest.fixture
def service(settings):
    """The payment service: the stand-in, quick to time out on an answer it lost."""
    stub = HttpStub().start()
    stub.lost_delay = 1.0
    settings.VENDOR_PAYMENT_URL = stub.url_for(PAYMENT_ENDPOINT)
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 0.5
    yield stub
    stub.stop()


@pytest.mark.slow
@pytest.mark.timeout(3600 if FAULTS else 600)
@pytest.mark.django_db(transaction=True)
def test_money_leaves_once_and_as_approved_whatever_the_interleaving(service):
    MoneyModel.stub = service
    REACHED.clear()
    run_state_machine_as_test(MoneyModel, settings=_search(EXAMPLES, SEARCH))
    print(f"money model, {EXAMPLES} examples reached: {sorted(REACHED.items())}")


class WithoutRecordingWhateverTheInsurance(MoneyModel):
    """Control: a payment already sent is checked against the vendor's insurance again
    before it is recorded (the rule "recorded after unknown regardless of insurance" of
    vendors/payments.py ``_payment`` taken back): a lapse between an unknown answer and
    its settling leaves money out and unrecorded."""

    def __init__(self):
        super().__init__()
        self._kept = payments._payment
        kept = self._kept

        def checking_insurance_every_time(invoice, actor, **options):
            if invoice.status == Status.APPROVED:
                check_insured(invoice.vendor, invoice.organization, today_of(invoice.organization))
            return kept(invoice, actor, **options)

        payments._payment = checking_insurance_every_time

    def teardown(self):
        try:
            super().teardown()
        finally:
            payments._payment = self._kept


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(not FAULTS, reason="make faults runs the control (FENCE_MODEL_FAULTS=1)")
@pytest.mark.django_db(transaction=True)
def test_the_checker_finds_recording_whatever_the_insurance_taken_back(service):
    WithoutRecordingWhateverTheInsurance.stub = service
    with pytest.raises((AssertionError, FlakyFailure)) as found:
        run_state_machine_as_test(
            WithoutRecordingWhateverTheInsurance,
            settings=_search(CONTROL_EXAMPLES, (Phase.generate,)),
        )
    violation = _violation(found.value)
    print(f"recording whatever the insurance taken back: the checker found: {violation}")


def _violation(found: BaseException) -> AssertionError:
    """The invariant that failed: Hypothesis replays a failing example once, and a replay of
    threads that does not fail the same way (stepping.SEARCH says why) is reported as a
    ``FlakyFailure`` around the failure it found first."""
    if isinstance(found, FlakyFailure):
        failures = [exc for exc in found.exceptions if isinstance(exc, AssertionError)]
        assert failures, f"the search failed, but on no invariant: {found!r}"
        return failures[0]
    return found


def _step_until(model: MoneyModel, holder: Holder, done) -> None:
    """Let ``holder`` send statements one at a time until ``done()``."""
    for _ in range(200):
        if done():
            return
        model.stepping.step(model.stepping.ready().index(holder), 1)
    raise AssertionError(f"{holder.name} never got there")


@pytest.mark.django_db(transaction=True)
def test_a_payer_overtaken_by_one_that_never_calls_leaves_its_payment_to_settle(service):
    """The smallest history the search found: A's call is paid and answered; A pauses past
    its lease; B, whose page showed the invoice before A's claim, takes the lease, claims
    the fence and stops at the payment's compare-and-swap (the page is out of date). A's
    commit is refused by the fence. The money left: it must be left to settle, not only to
    the next payer of the invoice."""
    MoneyModel.stub = service
    model = MoneyModel()
    model.two_invoices()
    first = model._invoices()[0]
    model.start(plan="pay", who="alice", which=0, amount=SMALL, take_over=False)
    model.start(plan="pay", who="bob", which=0, amount=SMALL, take_over=False)
    paying, stale = model.stepping.holders
    model.stepping.step(model.stepping.ready().index(stale), 2)  # its page, then it waits
    _step_until(model, paying, lambda: service.payments)  # paid, answered
    model.redis.pexpire(lock_key(payment_resource(first)), 0)  # A paused past its lease
    _step_until(model, stale, lambda: stale.done.is_set())
    _step_until(model, paying, lambda: paying.done.is_set())
    assert (paying.outcome, stale.outcome) == (
        "refused: Superseded",
        "refused: InvoiceChangedBeforePaying",
    )
    left = OutsideCall.objects.filter(resource=payment_resource(first), settled_at__isnull=True)
    assert list(left.values_list("token", "reason")) == [
        (1, "paid; its record was refused at the commit")
    ]
    model.teardown()  # settles, then the database and the service must agree
    [payment] = VendorPayment.objects.filter(invoice_id=first)
    assert (payment.reference, payment.fence_token) == (service.payments[0].reference, 3)
