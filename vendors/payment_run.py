"""The nightly payment run: every approved invoice that is due, paid exactly once.

``pay_approved`` is the service behind ``pay_approved_invoices --org SLUG`` and
``--all-orgs``: it finds the approved invoices due within ``due_within`` of each
association's today (in its own time zone), those of ``actor``'s associations if an actor
is given, and pays them ``TOGETHER`` at a time (``vendors.payments.pay_together``: each
under its own lease, committed together). The command only parses, shows the lines and
turns the result into an exit code through the answer table.

Several cron hosts may run it at once and share the work, as the month start does: an
invoice another host holds (busy, or superseded by it) is waited for, up to ``wait``, then
confirmed from the database or tried once more. An invoice voided or changed meanwhile is
no longer owed: it is counted apart, not as a failure. Redis down, or no payment service,
stops the run at once.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from hoa.answers.refusals import Refusal
from hoa.answers.table import Answer, BatchDone
from locking import Outcome
from vendors import invoice_answers
from vendors.exceptions import InvoiceRefused, InvoiceRule
from vendors.insurance import today_of
from vendors.models import Invoice
from vendors.payments import pay_together

# Invoices paid per transaction, each under its own lease.
TOGETHER = 20
# Another holder has it, or took over from this attempt, or the service's answer did not
# say whether it paid (settled by trying again with the same key): waited for, then tried
# again.
RETRIED = (Outcome.BUSY, Outcome.STALE, Outcome.LOST, Outcome.UNKNOWN)


@dataclass(frozen=True)
class InvoiceOutcome:
    """One invoice's answer in the run."""

    invoice_id: int
    organization: str  # its association's slug
    kind: Outcome
    answer: Answer
    message: str

    @property
    def held_elsewhere(self) -> bool:
        return self.kind in RETRIED

    @property
    def failed(self) -> bool:
        """Refused for good in this run (the service failed, the vendor is uninsured…)."""
        settled = (Outcome.COMMITTED, Outcome.ALREADY_DONE, Outcome.CONFLICT)
        return not self.held_elsewhere and self.kind not in settled


@dataclass
class PaymentRun(BatchDone):
    """What the run came to: paid here, found paid, changed meanwhile (voided, rejected…),
    failed, still held elsewhere at the deadline, or stopped (Redis down, no service)."""

    total: int
    wait: timedelta
    paid: int = 0
    already: int = 0
    changed: int = 0
    failed: int = 0
    held: set[int] = field(default_factory=set)
    unavailable: str = ""

    @property
    def summary(self) -> str:
        return invoice_answers.payment_run_summary(self)

    def unfinished(self) -> str:
        return invoice_answers.payment_run_unfinished(self)

    def count(self, outcome: InvoiceOutcome) -> None:
        self.held.discard(outcome.invoice_id)
        if outcome.kind == Outcome.COMMITTED:
            self.paid += 1
        elif outcome.kind == Outcome.ALREADY_DONE:
            self.already += 1
        elif outcome.held_elsewhere:
            self.held.add(outcome.invoice_id)
        elif outcome.failed:
            self.failed += 1
        else:  # voided, rejected or changed meanwhile: no longer owed as it was
            self.changed += 1


def invoices_to_pay(organizations, *, due_within: timedelta) -> list[Invoice]:
    """The approved invoices of ``organizations`` due by each one's today + ``due_within``,
    by association, then due date."""
    to_pay = []
    for organization in organizations:
        due_by = today_of(organization) + due_within
        invoices = (
            Invoice.objects.to_pay()
            .filter(organization=organization, due_on__lte=due_by)
            .select_related("vendor")
            .order_by("due_on", "pk")
        )
        for invoice in invoices:
            invoice.organization = organization
            to_pay.append(invoice)
    return to_pay


def pay_approved(
    *,
    organizations,
    actor,
    via: str,
    due_within: timedelta = timedelta(0),
    wait: timedelta = timedelta(0),
    on_outcome: Callable[[InvoiceOutcome, PaymentRun], None] = lambda outcome, run: None,
) -> PaymentRun:
    """Pay every approved invoice of ``organizations`` due within ``due_within``, waiting
    up to ``wait`` for those another host holds; ``on_outcome(outcome, run)`` hears each
    invoice's answer as it comes."""
    organizations = list(organizations)
    # Each invoice's payment checks ``actor`` is staff of its association (the resolver,
    # hoa.tenancy, has noted those it found): a list it is handed is not trusted.
    invoices = invoices_to_pay(organizations, due_within=due_within)
    run = PaymentRun(total=len(invoices), wait=wait)
    deadline = time.monotonic() + wait.total_seconds()
    _pay(run, invoices, actor, via, on_outcome)
    while run.held and not run.unavailable and time.monotonic() < deadline:
        time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
        held = Invoice.objects.filter(pk__in=run.held).select_related("organization", "vendor")
        _pay(run, list(held.order_by("pk")), actor, via, on_outcome)
    return run


def _pay(run: PaymentRun, invoices: list[Invoice], actor, via: str, on_outcome) -> None:
    for start in range(0, len(invoices), TOGETHER):
        chunk = invoices[start : start + TOGETHER]
        for invoice, answer in zip(chunk, pay_together(chunk, actor=actor, via=via), strict=True):
            outcome = _outcome(invoice, answer)
            if outcome.answer is Answer.UNAVAILABLE:
                run.unavailable = outcome.message
                return
            run.count(outcome)
            on_outcome(outcome, run)


def _outcome(invoice: Invoice, answer) -> InvoiceOutcome:
    """An invoice's result or refusal as the run counts it."""
    slug = invoice.organization.slug
    if not isinstance(answer, Refusal):
        return InvoiceOutcome(invoice.pk, slug, answer.outcome, answer.answer, str(answer))
    if isinstance(answer, InvoiceRefused) and answer.rule == InvoiceRule.NOT_APPROVED:
        kind = Outcome.CONFLICT  # voided or rejected since the run read it
    else:
        kind = answer.outcome or Outcome.FAILED
    return InvoiceOutcome(invoice.pk, slug, kind, answer.answer, str(answer))
