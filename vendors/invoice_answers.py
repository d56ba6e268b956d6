"""How the answers of invoices and their payment read to a person: one
place for the staff pages, the admin and the commands. Translated, with named placeholders.

``refusal_sentence`` renders every ``InvoicesError`` (``vendors.exceptions``) from its
facts. The invoice workflow has nothing to hide from staff: they and operators read the
same sentences. The kinds every operation shares, when they refuse a payment, the frame
says (``hoa.answers.sentences``) in the words of ``WORDS``, to each audience its own.
"""

from typing import TYPE_CHECKING

from django.utils.text import get_text_list
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext, ngettext_lazy

from hoa.answers.refusals import Refusal, sentence
from hoa.answers.sentences import Words
from hoa.answers.table import Audience
from hoa.web.money import format_money
from vendors.exceptions import (
    DuplicateInvoiceNumber,
    InvoiceChanged,
    InvoiceChangedBeforePaying,
    InvoiceNotAllowed,
    InvoiceRefused,
    InvoiceRule,
    InvoicesError,
    PaymentSent,
    PaymentServiceNotConfigured,
)
from vendors.models import Invoice, InvoiceEvent
from vendors.payment_client import PAYMENT_SERVICE

if TYPE_CHECKING:
    from hoa.fenced import Result

Rule = InvoiceRule

RULES = {
    Rule.NUMBER_REQUIRED: gettext_lazy("Enter the vendor's invoice number."),
    Rule.NUMBER_TOO_LONG: gettext_lazy("Keep the invoice number under %(max)s characters."),
    Rule.AMOUNT_NOT_POSITIVE: gettext_lazy("The amount must be more than zero."),
    Rule.AMOUNT_TOO_LARGE: gettext_lazy("The amount must be at most %(max)s."),
    Rule.AMOUNT_CENTS: gettext_lazy("The amount has at most two decimals (cents)."),
    Rule.AMOUNT_UNCHANGED: gettext_lazy("The invoice is already for %(amount)s."),
    Rule.DUE_BEFORE_ISSUED: gettext_lazy(
        "The due date must be on or after the invoice date (%(issued_on)s)."
    ),
    Rule.ISSUED_OUT_OF_RANGE: gettext_lazy(
        "The invoice date must be between %(earliest)s and %(latest)s."
    ),
    Rule.DUE_OUT_OF_RANGE: gettext_lazy(
        "The due date must be between the invoice date (%(earliest)s) and %(latest)s."
    ),
    Rule.ALREADY_APPROVED_BY_YOU: gettext_lazy(
        "You have approved this invoice already; a second approval must come from someone else."
    ),
    Rule.SECOND_NOT_RECORDER: gettext_lazy(
        "You recorded this invoice, so the second approval must come from someone else."
    ),
    Rule.RECORDER_MAY_NOT_APPROVE: gettext_lazy(
        "You recorded this invoice, and this association's rule is that the person who "
        "records an invoice may not approve it: the approval must come from someone else."
    ),
    Rule.REASON_TOO_LONG: gettext_lazy("Keep the reason under %(max)s characters."),
    Rule.NOT_A_PDF: gettext_lazy("The file is not a PDF. Attach the invoice as a PDF."),
    Rule.PDF_TOO_LARGE: gettext_lazy("The PDF is larger than %(megabytes)s MB."),
    Rule.NOT_APPROVED: gettext_lazy(
        "Only an approved invoice can be paid; this one is %(status)s."
    ),
}

ACTIONS = {
    "record": gettext_lazy("record"),
    "approve": gettext_lazy("approve"),
    "change": gettext_lazy("change"),
    "reject": gettext_lazy("reject"),
    "void": gettext_lazy("void"),
    "pay": gettext_lazy("pay"),
}

SAY_WHY = {
    "change": gettext_lazy("Say why the amount changes."),
    "reject": gettext_lazy("Say why the invoice is rejected."),
    "void": gettext_lazy("Say why the invoice is voided."),
}


# Its words in the refusals every operation shares, when they refuse a payment.
WORDS = Words(
    doing=lambda refusal: _("paying invoice #%(invoice)s") % {"invoice": refusal.invoice.pk},
    may=gettext_lazy("pay invoices of %(organization)s"),
    party=PAYMENT_SERVICE,
)


@sentence.register(InvoicesError)
def refusal_sentence(refusal: Refusal, audience: Audience) -> str:
    """What staff and operators read for a refusal of the invoice workflow (the same)."""
    said = workflow_sentence(refusal) or payment_sentence(refusal)
    if said is None:
        raise TypeError(f"no sentence for {type(refusal).__name__}")
    return said


def workflow_sentence(refusal: Refusal) -> str | None:
    """A refusal to record, approve, change, reject or void an invoice, said; else None."""
    match refusal:
        case InvoiceRefused():
            return rule(refusal.rule, refusal.facts)
        case InvoiceNotAllowed():
            return _("%(actor)s may not %(action)s invoices of %(organization)s.") % {
                "actor": refusal.actor,
                "action": ACTIONS[refusal.action],
                "organization": refusal.organization.name,
            }
        case DuplicateInvoiceNumber():
            return _(
                "%(vendor)s's invoice %(number)s is already recorded (invoice #%(existing)s, "
                "%(status)s); nothing was saved."
            ) % {
                "vendor": refusal.vendor.name,
                "number": refusal.number,
                "existing": refusal.existing.pk,
                "status": refusal.existing.get_status_display(),
            }
        case InvoiceChanged():
            return invoice_changed(refusal.current)
        case PaymentSent():
            return _(
                "A payment of invoice #%(invoice)s was sent to the payment service, which may "
                "have paid it: it can no longer be changed, only paid. Pay it again to settle "
                "it; nothing was saved."
            ) % {"invoice": refusal.invoice.pk}
    return None


def payment_sentence(refusal: Refusal) -> str | None:
    """A refusal of the payment's own rules, said; else None."""
    match refusal:
        case PaymentServiceNotConfigured():
            return _(
                "No payment service is configured (VENDOR_PAYMENT_URL), so invoice "
                "#%(invoice)s was not paid; nothing was saved."
            ) % {"invoice": refusal.invoice.pk}
        case InvoiceChangedBeforePaying():
            return _(
                "Invoice #%(invoice)s changed before it was paid: it is now %(status)s, for "
                "%(amount)s; nothing was paid."
            ) % {
                "invoice": refusal.current.pk,
                "status": refusal.current.get_status_display().lower(),
                "amount": format_money(refusal.current.amount),
            }
    return None


def payment_message(result: "Result", audience: Audience = Audience.STAFF) -> str:
    """What a successful payment did; operators (the command's line) also read the token."""
    payment, paid = result.row, result.committed
    values = {
        "invoice": payment.invoice_id,
        "vendor": payment.invoice.vendor.name,
        "amount": format_money(payment.amount, payment.currency),
        "reference": payment.reference,
    }
    if paid:
        said = _("Paid %(vendor)s %(amount)s for invoice #%(invoice)s (reference %(reference)s).")
    else:
        said = _(
            "Invoice #%(invoice)s was already paid: %(vendor)s, %(amount)s (reference "
            "%(reference)s)."
        )
    said %= values
    if audience is Audience.OPERATORS and paid:
        said = f"{said[:-1]} (token {result.token})."
    return said


def rule(name: InvoiceRule, facts: dict) -> str:
    """The sentence of a broken rule, its facts filled in."""
    match name:
        case Rule.NOT_FROM_HERE:
            return _("An invoice that is %(status)s cannot be %(done)s.") % {
                "status": Invoice.Status(facts["status"]).label.lower(),
                "done": _done(facts["action"]),
            }
        case Rule.SAY_WHY:
            return str(SAY_WHY[facts["action"]])
        case Rule.CONFIRM_NOT_DUPLICATE:
            other = facts["other"]
            return _(
                "This invoice has the same vendor, amount and date as invoice #%(other)s "
                "(number %(number)s): confirm that it is not the same bill before approving."
            ) % {"other": other.pk, "number": other.number}
        case Rule.AMOUNT_TOO_LARGE | Rule.AMOUNT_UNCHANGED:
            key = "max" if name == Rule.AMOUNT_TOO_LARGE else "amount"
            return RULES[name] % {key: format_money(facts[key])}
        case Rule.PDF_TOO_LARGE:
            return RULES[name] % {"megabytes": facts["limit"] // (1024 * 1024)}
        case Rule.DUE_BEFORE_ISSUED:
            return RULES[name] % {"issued_on": facts["issued_on"].isoformat()}
        case Rule.ISSUED_OUT_OF_RANGE | Rule.DUE_OUT_OF_RANGE:
            return RULES[name] % {key: day.isoformat() for key, day in facts.items()}
        case Rule.NOT_APPROVED:
            return RULES[name] % {"status": Invoice.Status(facts["status"]).label.lower()}
    return RULES[name] % facts


def approval_standing(standing) -> str:
    """Where an invoice's approvals stand (``vendors.approvals.Standing``): "1 of 2
    approvals — waiting for someone other than alice"."""
    said = ngettext(
        "%(given)d of %(needed)d approval", "%(given)d of %(needed)d approvals", standing.needed
    ) % {"given": standing.given, "needed": standing.needed}
    if standing.given >= standing.needed:
        return said
    if not_from := standing.not_from:
        return _("%(said)s — waiting for someone other than %(people)s") % {
            "said": said,
            "people": get_text_list(not_from, _("and")),
        }
    return _("%(said)s — waiting for an approver") % {"said": said}


def recorder_rule(policy) -> str:
    """The association's rule on the recorder approving (``ApprovalPolicy``), said."""
    if policy.recorder_may_approve:
        return _(
            "The person who records an invoice may give its first approval, never the "
            "second (this association's rule)."
        )
    return _("The person who records an invoice may not approve it (this association's rule).")


def _done(action: str) -> str:
    return {
        "approve": _("approved"),
        "change": _("changed"),
        "reject": _("rejected"),
        "void": _("voided"),
        "pay": _("paid"),
    }.get(action, action)


def invoice_changed(current: Invoice) -> str:
    return _(
        "Invoice #%(invoice)s changed since you looked: it is now %(status)s, for %(amount)s; "
        "nothing was saved. Look at it again and decide."
    ) % {
        "invoice": current.pk,
        "status": current.get_status_display().lower(),
        "amount": format_money(current.amount),
    }


def change_message(invoice: Invoice, event: InvoiceEvent) -> str:
    """What a change of the workflow did, for the page's message after the 303."""
    values = {"invoice": invoice.pk, "number": invoice.number, "vendor": invoice.vendor.name}
    match event.kind:
        case InvoiceEvent.Kind.RECORDED:
            said = _("Recorded %(vendor)s's invoice %(number)s as invoice #%(invoice)s.") % values
            if invoice.possible_duplicate_of_id:
                said += " " + _(
                    "It has the same vendor, amount and date as invoice #%(other)s: its "
                    "approval will ask you to confirm it is not the same bill."
                ) % {"other": invoice.possible_duplicate_of_id}
            return said
        case InvoiceEvent.Kind.APPROVED if event.to_status:
            return _("Invoice #%(invoice)s is approved: it can be paid.") % values
        case InvoiceEvent.Kind.APPROVED:
            return (
                _("You approved invoice #%(invoice)s; it needs a second approval by someone else.")
                % values
            )
        case InvoiceEvent.Kind.AMOUNT_CHANGED:
            return _(
                "Invoice #%(invoice)s is now for %(amount)s; it needs its approvals again."
            ) % {**values, "amount": format_money(invoice.amount)}
        case InvoiceEvent.Kind.REJECTED:
            return _("Invoice #%(invoice)s is rejected.") % values
        case InvoiceEvent.Kind.VOIDED:
            return _("Invoice #%(invoice)s is void.") % values
    return _("Invoice #%(invoice)s changed.") % values


# -- the payment run (vendors.payment_run) ------------------------------------------------------


# Its sentences (``hoa.batch.BatchKind``): the summary line (``-v 1``), and why it did not
# finish.
PAYMENT_RUN_SUMMARY = ngettext_lazy(
    "%(total)d invoice to pay: %(paid)d paid, %(already)d already paid, %(changed)d "
    "changed meanwhile, %(failed)d failed",
    "%(total)d invoices to pay: %(paid)d paid, %(already)d already paid, %(changed)d "
    "changed meanwhile, %(failed)d failed",
    "total",
)
PAYMENT_RUN_FAILED = ngettext_lazy(
    "%(count)d invoice could not be paid; see the lines above.",
    "%(count)d invoices could not be paid; see the lines above.",
    "count",
)
PAYMENT_RUN_HELD = ngettext_lazy(
    "%(count)d invoice was still being paid elsewhere after waiting %(wait)g s; run "
    "again later to confirm.",
    "%(count)d invoices were still being paid elsewhere after waiting %(wait)g s; run "
    "again later to confirm.",
    "count",
)
