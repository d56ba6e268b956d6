from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.admin_actions import ShownRows, answer_each, applying, ask
from hoa.admin_mixins import (
    AdminExtension,
    FencedRecordAdmin,
    SharedRowAdminMixin,
    TenantAdminMixin,
    TenantInlineMixin,
    extend,
)
from hoa.security.audit import client_ip
from hoa.tenancy import organizations_for
from hoa.web.money import format_money
from vendors import selectors, services
from vendors.forms import AssignVendorForm
from vendors.models import (
    ApprovalPolicy,
    Invoice,
    InvoiceApproval,
    InvoiceEvent,
    Vendor,
    VendorAssignment,
    VendorContract,
    VendorPayment,
)
from vendors.operations import ASSIGN_PERMISSION, PAY_PERMISSION
from vendors.payments import pay_invoice


class VendorContractInline(TenantInlineMixin, admin.TabularInline):
    # A vendor may work for several associations: show and offer only the user's.
    model = VendorContract
    extra = 0


@admin.register(Vendor)
class VendorAdmin(SharedRowAdminMixin, TenantAdminMixin, admin.ModelAdmin):
    list_display = ["name", "trade", "email"]
    # One vendor, several associations: each changes its own contracts, not the vendor.
    relied_on_through = (
        "contracts__organization",
        "insurance_lapses__organization",
        "assignments__complaint__organization",
        "invoices__organization",
    )
    search_fields = ["name", "trade"]
    inlines = [VendorContractInline]


@admin.register(VendorContract)
class VendorContractAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["vendor", "organization", "starts_on", "ends_on", "insurance_expires_on"]
    list_filter = ["organization"]
    search_fields = ["vendor__name"]
    list_select_related = ["vendor", "organization"]


@admin.register(VendorAssignment)
class VendorAssignmentAdmin(FencedRecordAdmin):
    """Made by the fenced service only; the history is the record of who sent whom, and
    when."""

    list_display = ["complaint", "vendor", "active", "fence_token", "assigned_at", "actor_label"]
    list_filter = ["active", "complaint__organization"]
    search_fields = ["complaint__title", "vendor__name"]
    list_select_related = ["complaint", "vendor"]
    readonly_fields = [f.name for f in VendorAssignment._meta.fields]


class VendorAssignmentInline(admin.TabularInline):
    """The complaint's assignment history, newest first, read-only."""

    model = VendorAssignment
    extra = 0
    can_delete = False
    verbose_name_plural = gettext_lazy("Vendor assignment history")
    fields = readonly_fields = [
        "vendor",
        "active",
        "fence_token",
        "assigned_at",
        "actor_label",
        "deactivated_at",
    ]
    ordering = ["-assigned_at", "-pk"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


# hoa does not know about vendors: what follows extends the frame's Complaint admin (the
# ``extend`` call below), and the frame's admin installs it.


@admin.display(description=gettext_lazy("vendor"), ordering="current_vendor_name")
def current_vendor(complaint):
    """The column of the complaint's active vendor (``selectors.with_current_vendor``)."""
    return complaint.current_vendor_name or "—"


class AssignSelectedForm(AssignVendorForm, ShownRows):
    """The admin's vendor for the selected complaints, with each one's active assignment as
    the page showed it: a reassignment replaces that one, and a selection whose vendors
    changed since is asked again."""


def _active_assignments(complaints) -> dict:
    return {complaint.pk: selectors.active_assignment(complaint) for complaint in complaints}


def _one_association(modeladmin, request, queryset):
    """The one association of the selected complaints, or ``None`` (and the user told why:
    none of them is the user's, or they are of several associations)."""
    organization_ids = set(queryset.values_list("organization_id", flat=True))
    if not organization_ids:  # the selected ids are not in this user's queryset
        modeladmin.message_user(
            request, _("None of the selected complaints could be found."), messages.ERROR
        )
        return None
    if len(organization_ids) > 1:
        modeladmin.message_user(
            request, _("Choose complaints of one association at a time."), messages.ERROR
        )
        return None
    (organization,) = organizations_for(request.user, ids=organization_ids, request=request)
    return organization


@admin.action(description=gettext_lazy("Assign vendor…"))
def assign_vendor(modeladmin, request, queryset):
    """Ask for a vendor (only those under contract today), showing each complaint's current
    one, then assign each complaint: the change the page showed, or nothing."""
    organization = _one_association(modeladmin, request, queryset)
    if organization is None:
        return None
    complaints = list(queryset.order_by("pk"))
    current = _active_assignments(complaints)
    showing = {pk: getattr(assignment, "pk", None) for pk, assignment in current.items()}
    form = AssignSelectedForm(
        request.POST if applying(request) else None,
        organization=organization,
        initial={"shown": ShownRows.shown_of(showing)},
    )
    if form.is_bound and form.is_valid() and not form.changed(showing):
        chosen, ip = form.cleaned_data, client_ip(request)
        answer_each(
            modeladmin,
            request,
            complaints,
            lambda complaint: services.assign_vendor(
                complaint=complaint,
                vendor=chosen["vendor"],
                actor=request.user,
                reassign=chosen["reassign"],
                # The assignment the page showed: one that becomes active meanwhile is
                # refused at the commit (compare-and-swap).
                replacing=current[complaint.pk],
                ip=ip,
            ),
        )
        return None
    if form.is_bound and form.is_valid():  # valid, but the vendors changed since the page
        modeladmin.message_user(
            request,
            _(
                "The vendors of the selected complaints changed since this page was shown; "
                "nothing was assigned. Check them below and confirm again."
            ),
            messages.WARNING,
        )
        form = AssignSelectedForm(
            organization=organization, initial={"shown": ShownRows.shown_of(showing)}
        )
    return ask(
        modeladmin,
        request,
        queryset,
        form,
        "vendors/admin/assign_vendor.html",
        title=_("Assign a vendor"),
        organization=organization,
        rows=[(complaint, current[complaint.pk]) for complaint in complaints],
    )


extend(
    AdminExtension(
        "hoa.Complaint",
        permission=ASSIGN_PERMISSION,
        actions=(assign_vendor,),
        columns=(current_vendor,),
        inlines=(VendorAssignmentInline,),
        queryset=selectors.with_current_vendor,
    )
)


# -- invoices and their payment -----------------------------------------------------------------


class PayInvoicesForm(ShownRows):
    """The intermediate page's confirmation: money leaves when it is submitted. It carries
    what the page showed: each invoice's version and the total."""

    total = forms.DecimalField(max_digits=16, decimal_places=2, widget=forms.HiddenInput)

    @classmethod
    def showing(cls, invoices: list[Invoice]) -> "PayInvoicesForm":
        """The confirmation of a page that shows ``invoices``."""
        shown = cls.shown_of({invoice.pk: invoice.version for invoice in invoices})
        return cls(initial={"shown": shown, "total": _total(invoices)})


def _total(invoices: list[Invoice]) -> Decimal:
    return sum((invoice.amount for invoice in invoices), Decimal("0.00"))


@admin.action(description=gettext_lazy("Pay the selected invoices…"), permissions=["pay"])
def pay_invoices(modeladmin, request, queryset):
    """Ask for a confirmation (the invoices and their total), then pay each once: the fenced
    payment, as the staff page and the nightly run make it. The confirmation pays what it
    showed or nothing: a selection, an invoice or a total changed since is asked again, and
    each payment is a compare-and-swap on the version shown."""
    chosen = list(queryset.select_related("organization", "vendor").order_by("pk"))
    form = PayInvoicesForm(request.POST) if applying(request) else PayInvoicesForm.showing(chosen)
    if form.is_bound and form.is_valid():
        now = {invoice.pk: invoice.version for invoice in chosen}
        if not form.changed(now) and form.cleaned_data["total"] == _total(chosen):
            ip = client_ip(request)
            answer_each(
                modeladmin,
                request,
                chosen,
                lambda invoice: pay_invoice(
                    invoice=invoice, actor=request.user, ip=ip, seen=now[invoice.pk]
                ),
            )
            return None
        modeladmin.message_user(
            request,
            _(
                "The invoices changed since this confirmation was shown (%(before)s then, "
                "%(now)s now); nothing was paid. Check them below and confirm again."
            )
            % {
                "before": format_money(form.cleaned_data["total"]),
                "now": format_money(_total(chosen)),
            },
            messages.WARNING,
        )
        form = PayInvoicesForm.showing(chosen)
    return ask(
        modeladmin,
        request,
        queryset,
        form,
        "vendors/admin/pay_invoices.html",
        title=_("Pay invoices"),
        invoices=chosen,
        total=_total(chosen),
    )


class InvoiceApprovalInline(admin.TabularInline):
    """Who approved what, voided approvals included; read-only (the workflow writes them)."""

    model = InvoiceApproval
    extra = 0
    can_delete = False
    fields = readonly_fields = ["approver", "amount", "at", "voided_at"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class InvoiceEventInline(admin.TabularInline):
    """The invoice's timeline, newest first, read-only."""

    model = InvoiceEvent
    extra = 0
    can_delete = False
    verbose_name_plural = gettext_lazy("Timeline")
    fields = readonly_fields = [
        "at",
        "kind",
        "actor_label",
        "from_status",
        "to_status",
        "amount_before",
        "amount_after",
        "note",
    ]
    ordering = ["-at", "-pk"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Invoice)
class InvoiceAdmin(FencedRecordAdmin):
    """Invoices, read-only here: recording, approving, changing, rejecting and voiding are
    the staff pages' (each a compare-and-swap on what the person saw, on the timeline);
    paying is the action, the same fenced payment as the page's and the nightly run's."""

    list_display = [
        "pk",
        "vendor",
        "number",
        "amount_with_currency",
        "issued_on",
        "due_on",
        "status",
        "organization",
    ]
    list_filter = ["status", "organization", "vendor"]
    search_fields = ["number", "vendor__name"]
    list_select_related = ["vendor", "organization"]
    date_hierarchy = "issued_on"
    actions = [pay_invoices]
    inlines = [InvoiceApprovalInline, InvoiceEventInline]
    fields = readonly_fields = [
        "organization",
        "vendor",
        "assignment",
        "number",
        "amount_with_currency",
        "issued_on",
        "due_on",
        "status",
        "version",
        "recorded_by",
        "recorded_at",
        "possible_duplicate_of",
        "duplicate_confirmed_by",
        "payment_claimed_at",
        "last_fence_token",
    ]

    @admin.display(description=gettext_lazy("amount"), ordering="amount")
    def amount_with_currency(self, invoice: Invoice) -> str:
        return format_money(invoice.amount)

    def has_pay_permission(self, request) -> bool:
        return request.user.has_perm(PAY_PERMISSION)


@admin.register(VendorPayment)
class VendorPaymentAdmin(FencedRecordAdmin):
    """Recorded by the fenced payment only."""

    list_display = ["invoice", "amount", "currency", "reference", "paid_at", "actor_label"]
    list_filter = ["invoice__organization"]
    search_fields = ["reference", "invoice__number", "invoice__vendor__name"]
    list_select_related = ["invoice__vendor"]
    readonly_fields = [f.name for f in VendorPayment._meta.fields]


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(TenantAdminMixin, admin.ModelAdmin):
    """Each association's approval threshold (above it: two approvals) and whether the
    person who records an invoice may approve it (by default not)."""

    list_display = ["organization", "approval_threshold", "recorder_may_approve", "updated_at"]
    list_select_related = ["organization"]
