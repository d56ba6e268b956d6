"""Staff pages of invoices: the association's list (filters, totals, CSV for the
accountant), one invoice (its timeline, approvals and the changes), recording an invoice
from a complaint, its PDF, and the POSTs that approve, change, reject, void and pay.

Every POST view is thin: ``OrganizationMixin`` resolves the association (404 unless staff
of it) and checks the permission (403); the invoice is found inside the association (404);
the form is validated (400, the invoice page again with its errors); one service call does
the work, and its answer goes through the answer table (``hoa.answers.table``): 303 to the
invoice page with a message, 409 when the invoice changed since the page was shown or is
being paid (the page says what it is now), 400, 502, 503, 429 for paying too often.
"""

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views import View
from django.views.generic import TemplateView

from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.answers.table import Answer, error_page
from hoa.models import Complaint
from hoa.security.audit import client_ip, limit_fenced_posts
from hoa.tenancy import OrganizationMixin
from hoa.web.lists import FilteredListView, csv_cell, csv_download, first_error
from vendors import approvals, invoice_answers, invoice_selectors, invoices
from vendors.insurance import today_of
from vendors.invoice_forms import (
    AmountForm,
    ApproveForm,
    InvoiceFilterForm,
    InvoiceForm,
    PayForm,
    RejectForm,
    VoidForm,
)
from vendors.models import Invoice
from vendors.operations import PAY_PERMISSION, PAYMENT_OPERATION
from vendors.payments import pay_invoice

VIEW_PERMISSION = "vendors.view_invoice"


def invoice_url(invoice: Invoice) -> str:
    return reverse("vendors:invoice", args=[invoice.organization.slug, invoice.pk])


class InvoiceListView(FilteredListView):
    """The association's invoices: filters, what it owes and paid this month, the CSV."""

    template_name = "vendors/invoice_list.html"
    context_object_name = "invoices"
    paginate_by = 50
    filter_form_class = InvoiceFilterForm
    permission_required = VIEW_PERMISSION

    def filter_form_kwargs(self) -> dict:
        return {"vendors": invoice_selectors.vendors_invoicing(self.organization)}

    def get_queryset(self):
        return invoice_selectors.filtered(
            invoice_selectors.invoices_of(self.organization),
            self.cleaned_filters,
            user=self.request.user,
            today=today_of(self.organization),
            policy=invoice_selectors.policy(self.organization),
        )

    def get_context_data(self, **kwargs):
        return super().get_context_data(
            totals=invoice_selectors.totals(self.organization),
            today=today_of(self.organization),
            **kwargs,
        )


class InvoiceCsvView(OrganizationMixin, View):
    """``GET …/invoices.csv``: the list's invoices, with its filters, for the accountant.

    Columns, in this order: ``invoice`` (our number), ``vendor``, ``vendor_invoice_number``,
    ``invoice_date``, ``due_date``, ``amount`` (a plain decimal), ``currency``, ``status``,
    ``paid_at`` (ISO 8601, empty unless paid), ``payment_reference``, ``complaint``. Rows
    newest invoice first; streamed, never held in memory.
    """

    http_method_names = ["get", "head"]
    permission_required = VIEW_PERMISSION
    COLUMNS = (
        "invoice",
        "vendor",
        "vendor_invoice_number",
        "invoice_date",
        "due_date",
        "amount",
        "currency",
        "status",
        "paid_at",
        "payment_reference",
        "complaint",
    )

    def get(self, request, *args, **kwargs):
        vendors = invoice_selectors.vendors_invoicing(self.organization)
        filters = InvoiceFilterForm(request.GET or None, vendors=vendors)
        if request.GET and not filters.is_valid():
            return error_page(request, 400, _("Not a filter"), first_error(filters))
        invoices = invoice_selectors.filtered(
            invoice_selectors.invoices_of(self.organization),
            filters.cleaned_data if filters.is_bound else {},
            user=request.user,
            today=today_of(self.organization),
            policy=invoice_selectors.policy(self.organization),
        )
        rows = map(_row, invoice_selectors.csv_rows(invoices))
        return csv_download(request, f"invoices-{self.organization.slug}.csv", self.COLUMNS, rows)


def _row(row) -> tuple:
    pk, vendor, number, issued_on, due_on, amount, status, paid_at, reference, complaint = row
    return (
        pk,
        csv_cell(vendor),
        csv_cell(number),
        issued_on.isoformat(),
        due_on.isoformat(),
        amount,
        settings.CURRENCY,
        status,
        paid_at.isoformat() if paid_at else "",
        csv_cell(reference or ""),
        complaint,
    )


class InvoiceDetailView(OrganizationMixin, TemplateView):
    """One invoice: its facts, approvals, payment, timeline, and the changes staff may make."""

    template_name = "vendors/invoice_detail.html"
    permission_required = VIEW_PERMISSION

    def get_queryset(self):
        # An invoice of another association under this association's URL is a 404.
        return Invoice.objects.for_organization(self.organization)

    def get_invoice(self) -> Invoice:
        invoice = get_object_or_404(
            invoice_selectors.invoice_of(self.organization, self.kwargs["pk"])
        )
        invoice.organization = self.organization
        return invoice

    def get_context_data(self, **kwargs):
        invoice = getattr(self, "invoice", None) or self.get_invoice()
        user = self.request.user
        seen = {"seen": invoice.version}
        policy = invoice_selectors.policy(self.organization)
        given = invoice_selectors.approvals(invoice)
        state = approvals.standing(invoice, policy, [a for a in given if a.voided_at is None])
        refusal = state.refusal(user.pk)
        context = {
            "invoice": invoice,
            "today": today_of(self.organization),
            "timeline": invoice_selectors.timeline(invoice),
            "approvals": given,
            "threshold": policy.approval_threshold,
            "approvals_needed": state.needed,
            "approval_standing": invoice_answers.approval_standing(state),
            "recorder_rule": invoice_answers.recorder_rule(policy),
            # No Approve button for whom it would refuse: the reason instead.
            "not_yours_to_approve": invoice_answers.rule(refusal, {}) if refusal else "",
            "approve_form": ApproveForm(initial=seen),
            "reject_form": RejectForm(initial=seen, prefix="reject"),
            "void_form": VoidForm(initial=seen, prefix="void"),
            "amount_form": AmountForm(initial=seen),
            "pay_form": PayForm(initial=seen),
            "can_approve": user.has_perm(invoices.APPROVE_PERMISSION),
            "can_change": user.has_perm(invoices.CHANGE_PERMISSION),
            "can_void": user.has_perm(invoices.VOID_PERMISSION),
            "can_pay": user.has_perm(PAY_PERMISSION),
            "payment_configured": bool(settings.VENDOR_PAYMENT_URL),
        }
        context.update(kwargs)  # a refused form's errors win
        return super().get_context_data(**context)


class InvoiceChangeView(InvoiceDetailView):
    """A POST that changes the invoice; a GET (a 409 page's address entered again) leads
    to the invoice. Subclasses name the form, its prefix and the service call."""

    http_method_names = ["get", "head", "post"]
    form_class: type
    form_name = ""
    prefix = None
    retried = False  # whether "Try again" may resend the same form (a busy lease)

    def get(self, request, *args, **kwargs):
        return redirect("vendors:invoice", self.organization.slug, kwargs["pk"])

    def post(self, request, *args, **kwargs):
        self.invoice = invoice = self.get_invoice()
        form = self.form_class(request.POST, prefix=self.prefix)
        if not form.is_valid():
            return self.refused(form)
        try:
            change = self.change(invoice, form.cleaned_data)
        except Refusal as exc:
            if exc.answer is Answer.BAD_REQUEST:  # the form's own mistake: said next to it
                form.add_error(None, exc.message)
                return self.refused(form)
            return answer_table.page(
                request,
                exc,
                **({} if self.retried else {"retry_url": ""}),
                extra_context={"organization": self.organization, "back_url": invoice_url(invoice)},
            )
        return answer_table.done(request, change, invoice_url(invoice))

    def refused(self, form):
        return self.render_to_response(self.get_context_data(**{self.form_name: form}), status=400)

    def change(self, invoice: Invoice, data: dict):
        raise NotImplementedError


class ApproveInvoiceView(InvoiceChangeView):
    permission_required = invoices.APPROVE_PERMISSION
    form_class, form_name = ApproveForm, "approve_form"

    def change(self, invoice, data):
        return invoices.approve_invoice(
            invoice=invoice,
            seen=data["seen"],
            actor=self.request.user,
            confirm_not_duplicate=data["confirm_not_duplicate"],
        )


class ChangeAmountView(InvoiceChangeView):
    permission_required = invoices.CHANGE_PERMISSION
    form_class, form_name = AmountForm, "amount_form"

    def change(self, invoice, data):
        return invoices.change_amount(
            invoice=invoice,
            seen=data["seen"],
            amount=data["amount"],
            reason=data["reason"],
            actor=self.request.user,
        )


class RejectInvoiceView(InvoiceChangeView):
    permission_required = invoices.VOID_PERMISSION
    form_class, form_name, prefix = RejectForm, "reject_form", "reject"

    def change(self, invoice, data):
        return invoices.reject_invoice(
            invoice=invoice, seen=data["seen"], reason=data["reason"], actor=self.request.user
        )


class VoidInvoiceView(InvoiceChangeView):
    permission_required = invoices.VOID_PERMISSION
    form_class, form_name, prefix = VoidForm, "void_form", "void"

    def change(self, invoice, data):
        return invoices.void_invoice(
            invoice=invoice, seen=data["seen"], reason=data["reason"], actor=self.request.user
        )


@method_decorator(limit_fenced_posts, name="dispatch")
class PayInvoiceView(InvoiceChangeView):
    """``POST …/invoices/<id>/pay/``: 303 paid (or already paid), 409 busy, taken over or
    changed since the page was shown, 400 not payable (uninsured), 502 the payment service
    failed, 503 Redis down or no payment service, 429 past the rate limit."""

    permission_required = PAY_PERMISSION
    operation = PAYMENT_OPERATION
    form_class, form_name = PayForm, "pay_form"
    retried = True

    def change(self, invoice, data):
        return pay_invoice(
            invoice=invoice, actor=self.request.user, ip=client_ip(self.request), seen=data["seen"]
        )


class InvoicePdfView(OrganizationMixin, View):
    """``GET …/invoices/<id>/invoice.pdf``: the invoice's PDF, to staff of its association
    only (404 otherwise), as a download: never rendered in the site's origin."""

    http_method_names = ["get", "head"]
    permission_required = VIEW_PERMISSION

    def get_queryset(self):
        return Invoice.objects.for_organization(self.organization)

    def get(self, request, *args, **kwargs):
        invoice = get_object_or_404(self.get_queryset().select_related("document"), pk=kwargs["pk"])
        document = getattr(invoice, "document", None)
        if document is None:
            return error_page(request, 404, _("No PDF"), _("No PDF was attached to this invoice."))
        response = HttpResponse(bytes(document.content), content_type="application/pdf")
        filename = f"invoice-{invoice.pk}.pdf"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        response["Cache-Control"] = "private, no-store"
        response["X-Content-Type-Options"] = "nosniff"
        return response


class RecordInvoiceView(OrganizationMixin, TemplateView):
    """``…/complaints/<id>/invoices/new/``: record what one of the complaint's vendors
    billed: the form (GET), then 303 to the new invoice, or 400 with the form's errors."""

    template_name = "vendors/invoice_new.html"
    http_method_names = ["get", "head", "post"]
    permission_required = invoices.RECORD_PERMISSION

    def get_queryset(self):
        return Complaint.objects.for_organization(self.organization)

    def dispatch_complaint(self) -> Complaint:
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])

    def get_context_data(self, **kwargs):
        complaint = self.dispatch_complaint()
        kwargs.setdefault(
            "form",
            InvoiceForm(
                complaint=complaint,
                initial={
                    "issued_on": today_of(self.organization),
                    "due_on": invoice_selectors.due_on_default(self.organization),
                },
            ),
        )
        return super().get_context_data(complaint=complaint, **kwargs)

    def post(self, request, *args, **kwargs):
        complaint = self.dispatch_complaint()
        form = InvoiceForm(request.POST, request.FILES, complaint=complaint)
        if not form.is_valid():
            return self.render_to_response(self.get_context_data(form=form), status=400)
        data = form.cleaned_data
        try:
            change = invoices.record_invoice(
                assignment=data["assignment"],
                number=data["number"],
                amount=data["amount"],
                issued_on=data["issued_on"],
                due_on=data["due_on"],
                actor=request.user,
                pdf=data["pdf"],
            )
        except Refusal as exc:
            if exc.answer is Answer.BAD_REQUEST:
                form.add_error(None, exc.message)
                return self.render_to_response(self.get_context_data(form=form), status=400)
            return answer_table.page(request, exc)
        return answer_table.done(request, change, invoice_url(change.invoice))
