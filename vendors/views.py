"""Staff pages: complaints with their vendor, the assign form, and the vendors' contracts.

The assign view is thin: it resolves the organization (404 unless staff of it), checks the
permission (403), finds the complaint inside that organization (404), validates the form
(400), calls ``assign_vendor`` once and turns its answer into a page.

The form carries the assignment the page showed (``replacing``); a reassignment replaces
that one only, and a 409 page that shows a newer one offers to replace it knowingly.

The complaint workflow (``hoa.complaints``: statuses, notes, SLA changes) has its POST
endpoints here, beside the page that shows the complaint: the same checks (404 for another
association, 403 without ``hoa.change_complaint``), 400 with the page and the sentence of
the broken rule, 409 when the status changed since the page was shown (the form carries
the status it showed), 303 back to the complaint otherwise. A GET on them is a 303 to the
complaint page.
"""

from django.contrib import messages
from django.db.models import Q
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views.generic import DetailView, ListView

from hoa import complaints as workflow
from hoa.answers import table as answer_table
from hoa.answers.pages import error_page, see_other
from hoa.answers.table import Answer
from hoa.models import Complaint
from hoa.security.ratelimits import limit_fenced_posts
from hoa.web.access import OrganizationMixin, client_ip
from vendors import answers, selectors
from vendors.exceptions import (
    AssignmentSuperseded,
    ChangedSinceViewed,
    VendorsError,
)
from vendors.forms import (
    AssignVendorForm,
    ComplaintFilterForm,
    ComplaintNoteForm,
    ComplaintSlaForm,
    ComplaintStatusForm,
    VendorFilterForm,
    first_error,
)
from vendors.operations import ASSIGN_PERMISSION, OPERATION
from vendors.services import assign_vendor

CHANGE_PERMISSION = "hoa.change_complaint"


class FilteredListView(OrganizationMixin, ListView):
    """A list with a GET filter form: a parameter that does not validate is a 400 page
    saying which, never a silently different list."""

    filter_form_class: type

    def get(self, request, *args, **kwargs):
        self.filters = self.filter_form_class(request.GET or None, **self.filter_form_kwargs())
        if request.GET and not self.filters.is_valid():
            return error_page(request, 400, _("Not a filter"), first_error(self.filters))
        return super().get(request, *args, **kwargs)

    def filter_form_kwargs(self) -> dict:
        return {}

    @property
    def cleaned_filters(self) -> dict:
        return self.filters.cleaned_data if self.filters.is_bound else {}

    def get_context_data(self, **kwargs):
        return super().get_context_data(filters=self.filters, **kwargs)


class ComplaintListView(FilteredListView):
    """The complaints: search (title, unit), filters (status, priority, SLA, vendor), sort."""

    template_name = "vendors/complaint_list.html"
    context_object_name = "complaints"
    paginate_by = 50
    filter_form_class = ComplaintFilterForm

    def filter_form_kwargs(self):
        return {"organization": self.organization}

    def get_queryset(self):
        complaints = Complaint.objects.for_organization(self.organization).select_related("unit")
        complaints = selectors.filter_complaints(complaints, self.cleaned_filters)
        return selectors.with_current_vendor(complaints)


class ComplaintDetailView(OrganizationMixin, DetailView):
    template_name = "vendors/complaint_detail.html"
    context_object_name = "complaint"

    def get_queryset(self):
        # A complaint of another organization under this organization's URL is a 404.
        return Complaint.objects.for_organization(self.organization).select_related(
            "unit", "organization"
        )

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        complaint = self.object
        current = selectors.active_assignment(complaint)
        context.setdefault(
            "form",
            AssignVendorForm(
                organization=self.organization,
                complaint=complaint,
                initial={"replacing": current},
            ),
        )
        has_vendor = current is not None
        offered = workflow.choices_from(complaint.status, has_vendor=has_vendor)
        context.setdefault(
            "status_form",
            ComplaintStatusForm(offered=offered, initial={"from_status": complaint.status}),
        )
        context.setdefault("note_form", ComplaintNoteForm())
        context.setdefault(
            "sla_form",
            ComplaintSlaForm(initial={"due_at": timezone.localtime(complaint.sla_due_at)})
            if complaint.sla_due_at
            else ComplaintSlaForm(),
        )
        context.update(
            current=current,
            history=selectors.assignment_history(complaint),
            timeline=selectors.timeline(complaint),
            can_assign=self.request.user.has_perm(ASSIGN_PERMISSION),
            can_change=self.request.user.has_perm(CHANGE_PERMISSION),
        )
        return context

    def complaint_url(self, complaint) -> str:
        return reverse("vendors:complaint", args=[self.organization.slug, complaint.pk])


@method_decorator(limit_fenced_posts, name="dispatch")
class AssignVendorView(ComplaintDetailView):
    """``POST …/complaints/<id>/assign/``: 303 to the complaint, 409 for the loser, 429
    past the rate limit. A GET (a 409 page's address entered again) leads to the
    complaint."""

    http_method_names = ["get", "post"]
    permission_required = ASSIGN_PERMISSION
    operation = OPERATION

    def get(self, request, *args, **kwargs):
        return redirect("vendors:complaint", self.organization.slug, self.get_object().pk)

    def post(self, request, *args, **kwargs):
        self.object = complaint = self.get_object()
        form = AssignVendorForm(request.POST, organization=self.organization, complaint=complaint)
        if not form.is_valid():
            return self.render_to_response(self.get_context_data(form=form), status=400)
        vendor, reassign = form.cleaned_data["vendor"], form.cleaned_data["reassign"]
        if form.carries_shown_assignment:
            replacing = form.cleaned_data["replacing"]
        else:  # posted by a client that showed no page: what is active now, before the lease
            replacing = selectors.active_assignment(complaint)
        try:
            result = assign_vendor(
                complaint=complaint,
                vendor=vendor,
                actor=request.user,
                reassign=reassign,
                replacing=replacing,
                ip=client_ip(request),
            )
        except VendorsError as exc:
            if exc.answer is Answer.BAD_REQUEST:  # no contract covers today: the form says so
                form.add_error("vendor", exc.message)
                return self.render_to_response(self.get_context_data(form=form), status=400)
            if exc.answer is Answer.RETRY:
                return self.conflict(exc, form)
            return answer_table.page(request, exc)
        return answer_table.done(request, result, self.complaint_url(complaint))

    def conflict(self, exc: VendorsError, form):
        """The loser's 409: who holds the lease or which assignment won, and a retry that
        replaces the assignment this page names (the person has now seen it), else the one
        the refused form had shown (or, like this request, none)."""
        complaint, vendor = self.object, form.cleaned_data["vendor"]
        winner = getattr(exc, "now_assigned", None)
        if isinstance(exc, AssignmentSuperseded):  # name the assignment that won
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
            template_name="vendors/assign_conflict.html",
            extra_context={
                "organization": self.organization,
                "complaint": complaint,
                "vendor": vendor,
                "reassign": form.cleaned_data["reassign"],
                "retry_replacing": retry_replacing,
                "back_url": self.complaint_url(complaint),
            },
        )


class ComplaintActionView(ComplaintDetailView):
    """Base of the workflow's POST endpoints; a GET is a 303 to the complaint page."""

    permission_required = CHANGE_PERMISSION
    http_method_names = ["get", "post"]
    form_class: type
    form_context_name: str

    def get(self, request, *args, **kwargs):
        return see_other(self.complaint_url(self.get_object()))

    def post(self, request, *args, **kwargs):
        self.object = complaint = self.get_object()
        form = self.make_form(request.POST)
        if not form.is_valid():
            return self.refused(form)
        try:
            message = self.apply(complaint, form.cleaned_data)
        except workflow.ComplaintsError as exc:
            if exc.answer is Answer.BAD_REQUEST:
                form.add_error(None, exc.message)
                return self.refused(form)
            return answer_table.page(
                request,
                exc,
                extra_context={
                    "organization": self.organization,
                    "back_url": self.complaint_url(complaint),
                },
                retry_fields=self.retry_fields(exc, form),
            )
        messages.success(request, message)
        return see_other(self.complaint_url(complaint))

    def make_form(self, data):
        return self.form_class(data)

    def refused(self, form):
        """400: the complaint page again, the form with the sentence of what is wrong."""
        context = self.get_context_data(**{self.form_context_name: form})
        return self.render_to_response(context, status=400)

    def retry_fields(self, exc, form):
        return None

    def apply(self, complaint, data) -> str:
        raise NotImplementedError


class ChangeStatusView(ComplaintActionView):
    """``POST …/complaints/<id>/status/``: ``from_status`` (what the page showed),
    ``to_status``, ``note``. 303, 400 (a rule), 409 (changed since shown), 403, 404."""

    form_class = ComplaintStatusForm
    form_context_name = "status_form"

    def has_vendor(self, complaint) -> bool:
        return selectors.active_assignment(complaint) is not None

    def make_form(self, data):
        offered = workflow.choices_from(self.object.status, has_vendor=self.has_vendor(self.object))
        return self.form_class(data, offered=offered)

    def apply(self, complaint, data) -> str:
        change = workflow.change_status(
            complaint=complaint,
            seen=data["from_status"],
            to=data["to_status"],
            note=data["note"],
            actor=self.request.user,
            has_vendor=self.has_vendor(complaint),
        )
        return change.message

    def retry_fields(self, exc, form):
        # "Try again" applies the same change to the status the complaint has now.
        return {
            "from_status": exc.current or "",
            "to_status": form.cleaned_data["to_status"],
            "note": form.cleaned_data["note"],
        }


class AddNoteView(ComplaintActionView):
    """``POST …/complaints/<id>/notes/``: a note on the timeline."""

    form_class = ComplaintNoteForm
    form_context_name = "note_form"

    def apply(self, complaint, data) -> str:
        workflow.add_note(complaint=complaint, note=data["note"], actor=self.request.user)
        return _("Note added to complaint #%(complaint)s.") % {"complaint": complaint.pk}


class ChangeSlaView(ComplaintActionView):
    """``POST …/complaints/<id>/sla/``: a new SLA due time and the reason, recorded."""

    form_class = ComplaintSlaForm
    form_context_name = "sla_form"

    def apply(self, complaint, data) -> str:
        workflow.change_sla(
            complaint=complaint,
            due_at=data["due_at"],
            reason=data["reason"],
            actor=self.request.user,
        )
        return _("The SLA of complaint #%(complaint)s is due %(due)s now.") % {
            "complaint": complaint.pk,
            "due": timezone.localtime(data["due_at"]).strftime("%Y-%m-%d %H:%M"),
        }


class VendorListView(FilteredListView):
    """The organization's vendors with their contract windows, searchable by name and trade."""

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
        return super().get_context_data(today=timezone.localdate(), **kwargs)


def _field_value(assignment) -> str:
    """The ``replacing`` field's value for an assignment, empty for none."""
    return str(assignment.pk) if assignment is not None else ""
