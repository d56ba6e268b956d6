"""The nightly payment run (``pay_approved``): the approved invoices of some associations
due within ``due_within`` of each one's today, paid ``TOGETHER`` at a time, shared with other
cron hosts as the month start is (``hoa.batch``). An invoice voided or changed meanwhile is
counted apart, not as a failure.
"""

from collections.abc import Callable, Iterator
from datetime import timedelta

from hoa.batch import Batch, BatchKind, ItemOutcome, chunks
from locking import Outcome
from vendors import invoice_answers
from vendors.exceptions import InvoiceRefused, InvoiceRule
from vendors.insurance import today_of
from vendors.models import Invoice
from vendors.payments import pay_together

# Invoices paid per transaction, each under its own lease.
TOGETHER = 20

# How the run counts an invoice's answer: paid, found paid, or changed meanwhile (voided,
# rejected or changed since the run read it: no longer owed as it was); another holder has
# it, or took over from this attempt, or the service's answer did not say whether it paid
# (settled by trying again with the same key): waited for, then tried again. Anything else
# (the service failed, the vendor is uninsured…) failed.
PAYMENT_RUN = BatchKind(
    settled={
        Outcome.COMMITTED: "paid",
        Outcome.ALREADY_DONE: "already",
        Outcome.CONFLICT: "changed",
    },
    retried=(Outcome.BUSY, Outcome.STALE, Outcome.LOST, Outcome.UNKNOWN),
    summary=invoice_answers.PAYMENT_RUN_SUMMARY,
    failed=invoice_answers.PAYMENT_RUN_FAILED,
    held=invoice_answers.PAYMENT_RUN_HELD,
)


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
    on_outcome: Callable[[ItemOutcome, Batch], None] | None = None,
) -> Batch:
    """Pay every approved invoice of ``organizations`` due within ``due_within``, waiting
    up to ``wait`` for those another host holds; ``on_outcome(outcome, run)`` hears each
    invoice's answer as it comes (``hoa.batch``: an outcome's ``key`` is the invoice's
    id)."""
    organizations = list(organizations)
    # Each invoice's payment checks ``actor`` is staff of its association (the resolver,
    # hoa.tenancy, has noted those it found): a list it is handed is not trusted.
    invoices = invoices_to_pay(organizations, due_within=due_within)
    run = Batch(PAYMENT_RUN, total=len(invoices), wait=wait)
    run.take(_pay(invoices, actor, via), on_outcome)
    run.wait_for_others(lambda held: _pay(_read(held), actor, via), on_outcome)
    return run


def _read(held: dict) -> list[Invoice]:
    """The invoices another holder had, read again."""
    rows = Invoice.objects.filter(pk__in=list(held)).select_related("organization", "vendor")
    return list(rows.order_by("pk"))


def _pay(invoices: list[Invoice], actor, via: str) -> Iterator[ItemOutcome]:
    """Each invoice's outcome, ``TOGETHER`` at a time."""
    for chunk in chunks(invoices, TOGETHER):
        for invoice, answer in zip(chunk, pay_together(chunk, actor=actor, via=via), strict=True):
            slug = invoice.organization.slug
            count = "changed" if _no_longer_approved(answer) else ""
            yield PAYMENT_RUN.outcome(invoice.pk, slug, answer, count=count)


def _no_longer_approved(answer) -> bool:
    """Voided or rejected since the run read it."""
    return isinstance(answer, InvoiceRefused) and answer.rule == InvoiceRule.NOT_APPROVED
