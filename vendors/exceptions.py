"""What vendor assignment, the invoice workflow and the payment of invoices refuse by
their own rules. Nothing was written in any of these cases.

Each class says which kind of answer it is and carries facts; ``vendors.answers`` (vendor
assignment) and ``vendors.invoice_answers`` (``InvoicesError``: invoices and their payment)
render their sentences when a page, the admin or the command asks
(``hoa.answers.refusals``). The refusals every fenced operation shares (busy, superseded,
not permitted…) are the frame's, carrying the attempt's subject: the ``complaint``, or the
``invoice``; the same two modules say them (``FencedOperation.answers``).
"""

from datetime import date
from enum import StrEnum

from django.utils.translation import gettext_lazy

from hoa.answers.refusals import Refusal
from hoa.answers.table import Answer
from hoa.models import Complaint, Organization
from locking import Outcome
from vendors.models import Invoice, Vendor, VendorAssignment, VendorContract


class VendorsError(Refusal):
    """Base class of everything vendor assignment refuses on purpose."""


class ContractNotActive(VendorsError):
    """No contract between ``vendor`` and ``organization`` covers ``day``; nothing locked.

    ``contract`` is the nearest one (the next to start, else the last to end), or ``None``
    when the vendor never had a contract with the organization.
    """

    answer = Answer.BAD_REQUEST
    title = gettext_lazy("No contract")

    def __init__(
        self,
        *,
        vendor: Vendor,
        organization: Organization,
        day: date,
        contract: VendorContract | None,
    ):
        super().__init__(vendor=vendor, organization=organization, day=day, contract=contract)

    @property
    def starts_later(self) -> bool:
        return self.contract is not None and self.contract.starts_on > self.day


class RefusedAtCommit(VendorsError):
    """A refusal decided by the state check inside the transaction, with the assignment
    active then (``now_assigned``, or ``None``).

    The attempt may have told its vendor before (the dispatch call precedes the
    transaction): then the runner records whom it told in vain and what the best-effort
    cancellation got (``told_in_vain``, ``cancellation``).
    """

    answer = Answer.RETRY

    def __init__(self, *, complaint: Complaint, now_assigned: VendorAssignment | None, **facts):
        super().__init__(complaint=complaint, now_assigned=now_assigned, **facts)


class AlreadyAssigned(RefusedAtCommit):
    """Another vendor (``winner``) is actively assigned and ``reassign`` was not asked.

    Trying the same again can never succeed (only a reassign can): overtaken, 409 on pages
    (which offer the reassign), exit 1 for commands; audited as a conflict.
    """

    answer = Answer.OVERTAKEN
    outcome = Outcome.CONFLICT
    title = gettext_lazy("This complaint already has a vendor")

    def __init__(self, *, complaint: Complaint, winner: VendorAssignment):
        super().__init__(complaint=complaint, now_assigned=winner, winner=winner)


class ChangedSinceViewed(RefusedAtCommit):
    """A reassignment was decided against ``expected`` (the assignment the caller saw, or
    ``None`` for none) but ``current`` is active at commit.

    Running again with ``current`` as the one to replace replaces it knowingly.
    """

    outcome = Outcome.CONFLICT
    title = gettext_lazy("Changed since you looked")

    def __init__(
        self,
        *,
        complaint: Complaint,
        expected: VendorAssignment | None,
        current: VendorAssignment | None,
    ):
        super().__init__(
            complaint=complaint, now_assigned=current, expected=expected, current=current
        )


class AssignmentChanged(RefusedAtCommit):
    """Another attempt changed the assignment (now ``current``) after this one decided not
    to call the vendor, and a write would now be needed. Trying again is safe."""

    outcome = Outcome.CONFLICT
    title = gettext_lazy("The vendor changed meanwhile")

    def __init__(self, *, complaint: Complaint, current: VendorAssignment | None):
        super().__init__(complaint=complaint, now_assigned=current, current=current)


class ComplaintClosed(VendorsError):
    """The complaint is closed, and was when the caller looked: a closed complaint gets no
    vendor until it is reopened. Refused before anything is locked."""

    answer = Answer.BAD_REQUEST
    title = gettext_lazy("This complaint is closed")

    def __init__(self, *, complaint: Complaint):
        super().__init__(complaint=complaint)


class ClosedSinceViewed(RefusedAtCommit):
    """The complaint was closed after the caller looked (``seen``: the status it saw), so
    the vendor asked for is not assigned; nothing was written. Found before the lease (the
    complaint read again), by the look under the lease (the vendor is not called) or by
    the state check after the fence (the vendor was told in vain, and gets the
    cancellation)."""

    answer = Answer.OVERTAKEN
    outcome = Outcome.CONFLICT
    title = gettext_lazy("The complaint was closed meanwhile")

    def __init__(self, *, complaint: Complaint, seen: str, now_assigned: VendorAssignment | None):
        super().__init__(complaint=complaint, now_assigned=now_assigned, seen=seen)


class VendorNotInsured(VendorsError):
    """``vendor``'s latest insurance certificate with ``organization`` expired before
    ``day`` (``insured_until``), or none is on file (``None``): it may not be assigned or
    paid; nothing locked."""

    answer = Answer.BAD_REQUEST
    title = gettext_lazy("Insurance lapsed")

    def __init__(
        self, *, vendor: Vendor, organization: Organization, day: date, insured_until: date | None
    ):
        super().__init__(
            vendor=vendor, organization=organization, day=day, insured_until=insured_until
        )


class CertificateNotAllowed(VendorsError):
    """``actor`` may not record insurance certificates of ``organization``'s vendors. 403,
    recorded as an ``AccessDenial``."""

    answer = Answer.FORBIDDEN
    title = gettext_lazy("Not allowed")

    def __init__(self, *, actor: str, organization: Organization):
        super().__init__(actor=actor, organization=organization)


class CertificateOutOfRange(VendorsError):
    """The certificate's expiry is not between ``earliest`` and ``latest`` (a typo such as
    1900-01-01 or 9999-12-31). 400, nothing written."""

    answer = Answer.BAD_REQUEST
    title = gettext_lazy("Not a certificate's date")

    def __init__(self, *, earliest: date, latest: date):
        super().__init__(earliest=earliest, latest=latest)


class CertificateChanged(VendorsError):
    """The contract's certificate expiry changed since the person saw ``seen``: it is now
    ``current.insurance_expires_on``. 409, nothing written; sending the same form again
    can never succeed (what it carries is out of date): the page shows what is on file."""

    answer = Answer.OVERTAKEN
    title = gettext_lazy("Changed since you looked")

    def __init__(self, *, current: VendorContract, seen: date | None):
        super().__init__(current=current, seen=seen)


# -- invoices --------------------------------------------------------------------------------


class InvoicesError(VendorsError):
    """Base of what the invoice workflow and the payment of invoices refuse on purpose;
    ``vendors.invoice_answers`` renders their sentences."""


class InvoiceRule(StrEnum):
    """The rule a refused change of an invoice breaks (``vendors.invoice_answers.RULES``)."""

    NUMBER_REQUIRED = "number-required"
    NUMBER_TOO_LONG = "number-too-long"
    AMOUNT_NOT_POSITIVE = "amount-not-positive"
    AMOUNT_TOO_LARGE = "amount-too-large"
    AMOUNT_CENTS = "amount-cents"
    AMOUNT_UNCHANGED = "amount-unchanged"
    DUE_BEFORE_ISSUED = "due-before-issued"
    ISSUED_OUT_OF_RANGE = "issued-out-of-range"
    DUE_OUT_OF_RANGE = "due-out-of-range"
    NOT_FROM_HERE = "not-from-here"
    ALREADY_APPROVED_BY_YOU = "already-approved-by-you"
    SECOND_NOT_RECORDER = "second-not-recorder"
    RECORDER_MAY_NOT_APPROVE = "recorder-may-not-approve"
    CONFIRM_NOT_DUPLICATE = "confirm-not-duplicate"
    SAY_WHY = "say-why"
    REASON_TOO_LONG = "reason-too-long"
    NOT_A_PDF = "not-a-pdf"
    PDF_TOO_LARGE = "pdf-too-large"
    NOT_APPROVED = "not-approved"


class InvoiceRefused(InvoicesError):
    """The change breaks ``rule``; ``facts`` fill its sentence. Nothing was written. 400."""

    answer = Answer.BAD_REQUEST
    title = gettext_lazy("This change is not allowed")

    def __init__(self, rule: InvoiceRule, **facts):
        super().__init__(rule=rule, facts=facts)


class InvoiceNotAllowed(InvoicesError):
    """The actor may not ``action`` (record, approve, void…) invoices of ``organization``.
    403, recorded as an ``AccessDenial``."""

    answer = Answer.FORBIDDEN
    outcome = Outcome.DENIED
    title = gettext_lazy("Not allowed")


class DuplicateInvoiceNumber(InvoicesError):
    """``vendor`` already has an invoice numbered ``number`` in the association
    (``existing``); nothing was written. 400."""

    answer = Answer.BAD_REQUEST
    title = gettext_lazy("Invoice already recorded")

    def __init__(self, *, vendor: Vendor, number: str, existing: Invoice | None):
        super().__init__(vendor=vendor, number=number, existing=existing)


class InvoiceChanged(InvoicesError):
    """Someone changed the invoice since the page was shown (``seen``, its version then):
    it is ``current`` now. Nothing was written. 409."""

    answer = Answer.OVERTAKEN
    outcome = Outcome.CONFLICT
    title = gettext_lazy("The invoice changed meanwhile")

    def __init__(self, *, invoice: Invoice, seen: int, current: Invoice):
        super().__init__(invoice=invoice, seen=seen, current=current)


class PaymentSent(InvoicesError):
    """A payment of the invoice was sent to the payment service (it is claimed): nothing
    but paying it may change it now. Nothing was written. 409."""

    answer = Answer.OVERTAKEN
    outcome = Outcome.CONFLICT
    title = gettext_lazy("A payment was sent")

    def __init__(self, *, invoice: Invoice):
        super().__init__(invoice=invoice)


# -- paying an invoice (the fenced operation) --------------------------------------------------


class PaymentServiceNotConfigured(InvoicesError):
    """``VENDOR_PAYMENT_URL`` is not set: nothing can be paid (never skipped, so that no
    payment is recorded that did not happen). 503; nothing locked."""

    answer = Answer.UNAVAILABLE
    title = gettext_lazy("No payment service")

    def __init__(self, *, invoice: Invoice):
        super().__init__(invoice=invoice)


class InvoiceChangedBeforePaying(InvoicesError):
    """Between the caller's look and the payment's claim, the invoice stopped being payable
    (voided, rejected, its amount changed: now ``current``); the payment service was not
    called. 409, audited as a conflict."""

    answer = Answer.OVERTAKEN
    outcome = Outcome.CONFLICT
    title = gettext_lazy("The invoice changed meanwhile")

    def __init__(self, *, invoice: Invoice, current: Invoice):
        super().__init__(invoice=invoice, current=current)
