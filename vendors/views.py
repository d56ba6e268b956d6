"""Staff pages of vendor assignment: the assign POST and the vendors' contracts.

The assign view resolves the organization (404), the permission (403), the complaint (404)
and the form (400), calls ``assign_vendor`` once and answers with a page; a 400 is the
complaint page again with the form's errors. The form carries what the page showed
(``replacing``, ``seen_status``), so a change since is a 409 that says what it is now.
"""

from django.db.models import Q
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.generic import TemplateView

from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal, Superseded
from hoa.answers.table import Answer
from hoa.complaints.views import ComplaintDetailView
from hoa.security.audit import client_ip, limit_fenced_posts
from hoa.tenancy import OrganizationMixin
from hoa.web.lists import FilteredListView
from vendors import answers, insurance, selectors
from vendors.exceptions import ChangedSinceViewed, ClosedSinceViewed, ComplaintClosed
from vendors.forms import AssignVendorForm, CertificateForm, VendorFilterForm
from vendors.models import Vendor
from vendors.operations import ASSIGN_PERMISSION, OPERATION
from vendors.services import assign_vendor


@method_decorator(limit_fenced_posts, name="dispatch")
class AssignVendorView(ComplaintDetailView):
    """``POST …/complaints/<id>/assign/``: 303 to the complaint, 409 for the loser, 429
    past the rate limit. A GET (a 409 page's address entered again) leads to the
    complaint."""

    http_method_names = ["get", "head", "post"]
    permission_required = ASSIGN_PERMISSION
    operation = OPERATION

    def get(self, request, *args, **kwargs):
        return redirect("complaints:complaint", self.organization.slug, self.get_object().pk)

    def post(self, request, *args, **kwargs):
        self.object = complaint = self.get_object()
        form = AssignVendorForm(request.POST, organization=self.organization, complaint=complaint)
        if not form.is_valid():
            return self.render_to_response(self.get_context_data(form=form), status=400)
        vendor = form.cleaned_data["vendor"]
        # A client that posted no status showed no page: what it decides on is what is now.
        seen_status = form.cleaned_data["seen_status"] or None
        if form.carries_shown_assignment:
            # The page said what the staff member saw: replacing it is what they asked, and
            # only it (a vendor assigned since is a 409 naming them). No box to tick.
            reassign, replacing = True, form.cleaned_data["replacing"]
        else:  # posted by a client that showed no page: what is active now, before the lease
            reassign = form.cleaned_data["reassign"]
            replacing = selectors.active_assignment(complaint)
        try:
            result = assign_vendor(
                complaint=complaint,
                vendor=vendor,
                actor=request.user,
                reassign=reassign,
                replacing=replacing,
                seen_status=seen_status,
                ip=client_ip(request),
            )
        except Refusal as exc:
            if isinstance(exc, ComplaintClosed | ClosedSinceViewed):  # nothing to offer instead
                return answer_table.page(
                    request,
                    exc,
                    back_url=self.complaint_url(complaint),
                    extra_context={"organization": self.organization},
                )
            if exc.answer is Answer.BAD_REQUEST:  # no contract covers today: the form says so
                form.add_error("vendor", exc.message)
                return self.render_to_response(self.get_context_data(form=form), status=400)
            if exc.answer in (Answer.RETRY, Answer.OVERTAKEN):
                return self.conflict(exc, form)
            return answer_table.page(request, exc)
        return answer_table.done(request, result, self.complaint_url(complaint))

    def conflict(self, exc: Refusal, form):
        """The loser's 409: who holds the lease or which assignment won, and a retry that
        replaces the assignment this page names (the person has now seen it), else the one
        the refused form had shown (or, like this request, none)."""
        complaint, vendor = self.object, form.cleaned_data["vendor"]
        winner = getattr(exc, "now_assigned", None)
        if isinstance(exc, Superseded):  # name the assignment that won
            winner = selectors.active_assignment(complaint)
        if winner is not None or isinstance(exc, ChangedSinceViewed):
            retry_replacing = _field_value(winner)
        elif form.carries_shown_assignment:
            retry_replacing = _field_value(form.cleaned_data["replacing"])
        else:
            retry_replacing = None
        return answer_table.page(
            self.request,
            exc,
            message=answers.conflict_message(exc, vendor),
            winner=answers.current_vendor(winner) if winner else None,
            # Overtaken by another vendor, the page offers this one instead (a reassign).
            retry_url=self.request.path,
            template_name="vendors/assign_conflict.html",
            extra_context={
                "organization": self.organization,
                "complaint": complaint,
                "vendor": vendor,
                "retry_replacing": retry_replacing,
                "back_url": self.complaint_url(complaint),
            },
        )


class VendorListView(FilteredListView):
    """The organization's vendors with their contract windows and insurance, searchable by
    name and trade; above them, the vendors whose certificate lapses within 30 days, has
    lapsed, or is not on file."""

    template_name = "vendors/vendor_list.html"
    context_object_name = "contracts"
    paginate_by = 50
    filter_form_class = VendorFilterForm

    def get_queryset(self):
        contracts = selectors.contracts_of(self.organization)
        if query := self.cleaned_filters.get("q"):
            contracts = contracts.filter(
                Q(vendor__name__icontains=query) | Q(vendor__trade__icontains=query)
            )
        return contracts

    def get_context_data(self, **kwargs):
        today = insurance.today_of(self.organization)
        return super().get_context_data(
            today=today,
            lapsing=list(insurance.lapsing(self.organization, today=today)),
            lapsing_days=insurance.LAPSING_WITHIN.days,
            can_record_insurance=self.request.user.has_perm(
                insurance.RECORD_CERTIFICATE_PERMISSION
            ),
            **kwargs,
        )


def insurance_url(organization, vendor) -> str:
    return reverse("vendors:insurance", args=[organization.slug, vendor.pk])


class InsuranceView(OrganizationMixin, TemplateView):
    """``…/vendors/<id>/insurance/``: a vendor's contracts with the association, the expiry
    of the certificate on each, their history, and (with ``vendors.record_insurance``) a
    form per contract to record a new certificate's expiry."""

    template_name = "vendors/insurance.html"
    permission_required = "vendors.view_vendorcontract"

    def get_queryset(self):
        # A vendor without a contract with this association is a 404 under its URL.
        return Vendor.objects.for_organization(self.organization)

    def get_vendor(self) -> Vendor:
        return get_object_or_404(self.get_queryset().distinct(), pk=self.kwargs["pk"])

    def get_context_data(self, **kwargs):
        vendor = getattr(self, "vendor", None) or self.get_vendor()
        today = insurance.today_of(self.organization)
        contracts = selectors.contracts_of_vendor(self.organization, vendor)
        forms = {contract.pk: _certificate_form(contract) for contract in contracts}
        refused = kwargs.pop("refused", None)
        shown = getattr(refused, "cleaned_data", {}).get("contract")
        if shown is not None and shown.pk in forms:  # its errors beside its contract
            refused.auto_id = f"id_contract{shown.pk}_%s"
            forms[shown.pk], refused = refused, None
        context = {
            "refused": refused,  # a form for no contract on the page: its errors above
            "vendor": vendor,
            "today": today,
            "insured_until": vendor.insured_until(self.organization, contracts),
            "rows": [(contract, forms[contract.pk]) for contract in contracts],
            "history": selectors.certificates_recorded(self.organization, vendor),
            "can_record": self.request.user.has_perm(insurance.RECORD_CERTIFICATE_PERMISSION),
        }
        return super().get_context_data(**context, **kwargs)


def _certificate_form(contract) -> CertificateForm:
    """The form of one contract, carrying the expiry the page shows for it."""
    return CertificateForm(
        initial={"contract": contract.pk, "seen": contract.insurance_expires_on},
        auto_id=f"id_contract{contract.pk}_%s",  # one form per contract: ids apart
    )


class RecordCertificateView(InsuranceView):
    """``POST …/vendors/<id>/insurance/record/``: record a new certificate's expiry on one
    of the vendor's contracts with the association. 303 to the insurance page; 400 with
    the form's errors; 409 when the contract's expiry changed since the page showed it
    (``CertificateChanged``: the page says what is on file now); 403 without the
    permission. A GET leads to the insurance page."""

    http_method_names = ["get", "head", "post"]
    permission_required = insurance.RECORD_CERTIFICATE_PERMISSION

    def get(self, request, *args, **kwargs):
        return redirect("vendors:insurance", self.organization.slug, kwargs["pk"])

    def post(self, request, *args, **kwargs):
        self.vendor = vendor = self.get_vendor()
        contracts = selectors.contracts_of_vendor(self.organization, vendor)
        form = CertificateForm(request.POST, contracts=contracts)
        if not form.is_valid():
            return self.refused(form)
        data = form.cleaned_data
        try:
            change = insurance.record_certificate(
                contract=data["contract"],
                expires_on=data["expires_on"],
                seen=data["seen"],
                actor=request.user,
            )
        except Refusal as exc:
            if exc.answer is Answer.BAD_REQUEST:  # the date's own mistake: said next to it
                form.add_error("expires_on", exc.message)
                return self.refused(form)
            return answer_table.page(
                request,
                exc,
                back_url=insurance_url(self.organization, vendor),
                extra_context={"organization": self.organization},
            )
        return answer_table.done(request, change, insurance_url(self.organization, vendor))

    def refused(self, form):
        return self.render_to_response(self.get_context_data(refused=form), status=400)


def _field_value(assignment) -> str:
    """The ``replacing`` field's value for an assignment, empty for none."""
    return str(assignment.pk) if assignment is not None else ""
