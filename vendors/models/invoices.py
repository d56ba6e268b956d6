"""Vendor invoices: what a vendor billed for an assignment, its approvals, its timeline and
its PDF; each association's approval threshold.

``organization`` and ``vendor`` are kept on the row (lists and the duplicate rule key on
them) and held to the assignment's by the database (vendors 0007). Every change bumps
``version`` and writes an ``InvoiceEvent``; a claimed invoice (``payment_claim``) changes
only by its payment. The states: docs/staff-guide.md, "Rejecting, voiding, paying".
"""

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import connections, models
from django.db.models import F, Q
from django.db.models.functions import Lower
from django.db.transaction import TransactionManagementError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.models import Organization
from hoa.tenancy import TenantQuerySet
from locking.advisory import advisory_key
from locking.models import FencedModel
from vendors.models.assignments import VendorAssignment
from vendors.models.contracts import Vendor

# The threshold of an association that has not set one: above it, two approvals.
DEFAULT_APPROVAL_THRESHOLD = Decimal("1000.00")
# The largest amount an invoice may carry (12 digits, 2 after the point).
MAX_AMOUNT = Decimal("9999999999.99")


class ApprovalPolicy(models.Model):
    """An association's rule for approving invoices: above ``approval_threshold``, an
    invoice needs two approvals by two different people; ``recorder_may_approve`` says
    whether the person who recorded an invoice may give one of them (by default not:
    separation of duties, at any amount)."""

    organization = models.OneToOneField(
        Organization, on_delete=models.CASCADE, primary_key=True, related_name="invoice_policy"
    )
    approval_threshold = models.DecimalField(
        _("approval threshold"),
        max_digits=12,
        decimal_places=2,
        default=DEFAULT_APPROVAL_THRESHOLD,
        validators=[MinValueValidator(Decimal("0"))],
        help_text=_("Invoices above this amount need two approvals by two different people."),
    )
    recorder_may_approve = models.BooleanField(
        _("the person who records an invoice may approve it"),
        default=False,
        help_text=_(
            "Off (the default): whoever records an invoice may not approve it, at any "
            "amount. On: they may give its first approval, never the second."
        ),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        verbose_name = _("invoice approval policy")
        verbose_name_plural = _("invoice approval policies")
        constraints = [
            models.CheckConstraint(
                condition=Q(approval_threshold__gte=0), name="approval_threshold_not_negative"
            )
        ]

    def __str__(self):
        return f"{self.organization}: {self.approval_threshold}"

    @classmethod
    def of(cls, organization: Organization) -> "ApprovalPolicy":
        """The association's policy: its own, else the defaults (not saved)."""
        policy = cls.objects.filter(organization=organization).first()
        return policy if policy is not None else cls(organization=organization)

    @classmethod
    def threshold_for(cls, organization: Organization) -> Decimal:
        policy = cls.objects.filter(organization=organization).only("approval_threshold").first()
        return policy.approval_threshold if policy else DEFAULT_APPROVAL_THRESHOLD


class InvoiceQuerySet(TenantQuerySet):
    def owed(self):
        """Invoices the association still owes: received or approved."""
        return self.filter(status__in=Invoice.OWED_STATUSES)

    def overdue(self, today):
        """Owed invoices whose due date is before ``today``."""
        return self.owed().filter(due_on__lt=today)

    def to_pay(self):
        """Approved invoices: those a payment may take (a claimed one included)."""
        return self.filter(status=Invoice.Status.APPROVED)

    def lock_duplicates_of(self, *, organization_id: int, vendor_id: int) -> None:
        """Wait for, and hold until the transaction ends, the lock under which the
        possible-duplicate flag of ``vendor_id``'s invoices in ``organization_id`` is
        decided (``pg_advisory_xact_lock``). Recording an invoice and changing an amount
        take it before they look for an earlier copy: two copies of one bill written at
        once are decided one after the other, the second seeing the first."""
        connection = connections[self.db]
        if not connection.in_atomic_block:
            raise TransactionManagementError("a transaction-level lock outside a transaction")
        name = f"vendors:invoice-duplicates:{organization_id}:{vendor_id}"
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(name)])


class Invoice(FencedModel):
    """What a vendor billed for one assignment. ``last_fence_token`` fences the payment's
    claim (``payment_claim``); the payment itself is a ``VendorPayment``."""

    class Status(models.TextChoices):
        RECEIVED = "received", _("Received")
        APPROVED = "approved", _("Approved")
        PAID = "paid", _("Paid")
        REJECTED = "rejected", _("Rejected")
        VOID = "void", _("Void")

    OWED_STATUSES = (Status.RECEIVED, Status.APPROVED)
    FINAL_STATUSES = (Status.PAID, Status.REJECTED, Status.VOID)

    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="vendor_invoices"
    )
    assignment = models.ForeignKey(
        VendorAssignment, on_delete=models.PROTECT, related_name="invoices"
    )
    vendor = models.ForeignKey(Vendor, on_delete=models.PROTECT, related_name="invoices")
    number = models.CharField(_("invoice number"), max_length=64)
    amount = models.DecimalField(_("amount"), max_digits=12, decimal_places=2)
    issued_on = models.DateField(_("invoice date"))
    due_on = models.DateField(_("due date"))
    status = models.CharField(
        _("status"), max_length=20, choices=Status.choices, default=Status.RECEIVED
    )
    # Bumped by every change: what an approver, a voider or an editor saw.
    version = models.PositiveIntegerField(_("version"), default=1)
    recorded_at = models.DateTimeField(_("recorded at"), default=timezone.now)
    recorded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("recorded by"),
    )
    # Another invoice of the same vendor, amount and date (with another number): approving
    # this one needs a confirmation that it is not the same bill twice.
    possible_duplicate_of = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("possible duplicate of"),
    )
    duplicate_confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("not a duplicate, confirmed by"),
    )
    duplicate_confirmed_at = models.DateTimeField(_("confirmed at"), null=True, blank=True)
    # The fencing token of the payment that claimed this invoice before calling the
    # payment service (NULL: no payment has been sent). While set, only a payment may
    # change the invoice: the service may have paid it.
    payment_claim = models.BigIntegerField(_("payment claimed by token"), null=True, blank=True)
    payment_claimed_at = models.DateTimeField(_("payment sent at"), null=True, blank=True)

    objects = InvoiceQuerySet.as_manager()

    class Meta:
        ordering = ["-issued_on", "-pk"]
        permissions = [
            ("approve_invoice", "Can approve vendor invoices"),
            ("void_invoice", "Can reject or void vendor invoices"),
            ("pay_invoice", "Can pay approved vendor invoices"),
        ]
        constraints = [
            # One vendor's invoice number once per association (case aside); a voided
            # invoice (recorded by mistake) frees its number.
            models.UniqueConstraint(
                Lower("number"),
                F("organization"),
                F("vendor"),
                condition=~Q(status="void"),
                name="one_invoice_number_per_vendor",
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="invoice_amount_positive"),
            models.CheckConstraint(
                condition=Q(due_on__gte=F("issued_on")), name="invoice_due_after_issued"
            ),
            models.CheckConstraint(condition=~Q(number=""), name="invoice_number_not_empty"),
            # A claimed invoice is approved (being paid) or paid.
            models.CheckConstraint(
                condition=Q(payment_claim__isnull=True) | Q(status__in=["approved", "paid"]),
                name="invoice_claimed_only_when_approved",
            ),
            models.CheckConstraint(
                condition=~Q(possible_duplicate_of=F("id")), name="invoice_not_its_own_duplicate"
            ),
            models.CheckConstraint(
                condition=Q(last_fence_token__gte=0), name="invoice_fence_not_negative"
            ),
        ]
        indexes = [
            models.Index(fields=["organization", "status", "due_on"], name="invoice_owed_idx"),
            models.Index(
                fields=["organization", "vendor", "amount", "issued_on"],
                name="invoice_duplicate_idx",
            ),
        ]

    def __str__(self):
        return f"{self.vendor} {self.number}"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL_STATUSES

    @property
    def is_claimed(self) -> bool:
        """A payment was sent to the payment service for it (it may have been paid)."""
        return self.payment_claim is not None

    @property
    def needs_duplicate_confirmation(self) -> bool:
        return self.possible_duplicate_of_id is not None and self.duplicate_confirmed_at is None


class InvoiceApprovalQuerySet(TenantQuerySet):
    tenant_path = "invoice__organization"

    def standing(self):
        """Approvals not voided by a later change of the amount."""
        return self.filter(voided_at__isnull=True)


class InvoiceApproval(models.Model):
    """One person's approval of an invoice at the amount they saw. A later change of the
    amount voids it (``voided_at``); a person has at most one standing approval of an
    invoice (the database holds it), so two approvals are two different people."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="approvals")
    approver = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    amount = models.DecimalField(_("amount approved"), max_digits=12, decimal_places=2)
    at = models.DateTimeField(_("approved at"), default=timezone.now)
    voided_at = models.DateTimeField(_("voided at"), null=True, blank=True)

    objects = InvoiceApprovalQuerySet.as_manager()

    class Meta:
        ordering = ["at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["invoice", "approver"],
                condition=Q(voided_at__isnull=True),
                name="one_standing_approval_per_person",
            )
        ]

    def __str__(self):
        return f"{self.approver} approved {self.invoice} ({self.amount})"


class InvoiceEventQuerySet(TenantQuerySet):
    tenant_path = "invoice__organization"


class InvoiceEvent(models.Model):
    """A line of an invoice's timeline: who changed what, when and why. Written in the
    same transaction as the change; never edited."""

    class Kind(models.TextChoices):
        RECORDED = "recorded", _("Recorded")
        APPROVED = "approved", _("Approved")
        AMOUNT_CHANGED = "amount_changed", _("Amount changed")
        DUPLICATE_CONFIRMED = "duplicate_confirmed", _("Not a duplicate")
        REJECTED = "rejected", _("Rejected")
        VOIDED = "voided", _("Voided")
        PAYMENT_SENT = "payment_sent", _("Payment sent")
        PAID = "paid", _("Paid")
        INSURANCE_LAPSED = "insurance_lapsed", _("Insurance lapsed")

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=30, choices=Kind.choices)
    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Who, as recorded when it happened (a user, ``alice via cli:ops``, or ``system``).
    actor_label = models.CharField(max_length=200, blank=True, default="")
    note = models.TextField(blank=True, default="")  # why, in the person's words
    from_status = models.CharField(max_length=20, choices=Invoice.Status.choices, blank=True)
    to_status = models.CharField(max_length=20, choices=Invoice.Status.choices, blank=True)
    amount_before = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    amount_after = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)

    objects = InvoiceEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self):
        return f"{self.get_kind_display()} · {self.invoice_id}"


class InvoiceDocumentQuerySet(TenantQuerySet):
    tenant_path = "invoice__organization"


class InvoiceDocument(models.Model):
    """The invoice's PDF, kept in PostgreSQL with the invoice (at most 10 MB): backed up
    and restored with it, never on a web host's disk, and read only through the staff
    page that checks the reader is staff of the invoice's association."""

    MAX_BYTES = 10 * 1024 * 1024

    invoice = models.OneToOneField(Invoice, on_delete=models.CASCADE, related_name="document")
    filename = models.CharField(_("file name"), max_length=200)
    content = models.BinaryField(_("content"))
    size = models.PositiveIntegerField(_("size"))
    sha256 = models.CharField(_("SHA-256"), max_length=64)
    uploaded_at = models.DateTimeField(_("uploaded at"), default=timezone.now)

    objects = InvoiceDocumentQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(size__gt=0, size__lte=10 * 1024 * 1024), name="invoice_pdf_size"
            )
        ]

    def __str__(self):
        return self.filename
