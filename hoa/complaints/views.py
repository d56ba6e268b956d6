"""Staff pages of the complaints: the list, one complaint, and the workflow's POSTs.

The complaint page shows the complaint, its timeline and the workflow's forms (status,
notes, SLA); what fenced operations add to it (the vendor: a section, list column and
filter, timeline entries) comes from their ``ComplaintExtension``, so these pages name no
app. The workflow's POST endpoints take the same checks as every staff page: 404 for
another association, 403 without ``hoa.change_complaint``, 400 with the page and the
sentence of the broken rule, 409 when the status changed since the page was shown (the
form carries the status it showed), 303 back to the complaint otherwise. A GET on them is a
303 to the complaint page.
"""

from collections.abc import Callable

from django.contrib import messages
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.generic import DetailView, TemplateView

from hoa.answers import table as answer_table
from hoa.answers.table import Answer, see_other
from hoa.complaints import answers, selectors, workflow
from hoa.complaints.exceptions import ComplaintsError
from hoa.complaints.extensions import assigned, extensions
from hoa.complaints.forms import (
    ComplaintFilterForm,
    ComplaintForm,
    ComplaintNoteForm,
    ComplaintSlaForm,
    ComplaintStatusForm,
)
from hoa.complaints.workflow import Change, allows
from hoa.dates import when
from hoa.models import Complaint
from hoa.tenancy import OrganizationMixin
from hoa.web.fields import BIGINT_MAX
from hoa.web.lists import FilteredListView

CHANGE_PERMISSION = "hoa.change_complaint"


class ComplaintListView(FilteredListView):
    """The complaints: search (title, unit), filters (status, priority, SLA, and the
    operations'), sort, and the operations' columns."""

    template_name = "hoa/complaints/complaint_list.html"
    context_object_name = "complaints"
    paginate_by = 50
    filter_form_class = ComplaintFilterForm

    def filter_form_kwargs(self):
        return {"organization": self.organization}

    def get_queryset(self):
        return selectors.complaint_list(self.organization, self.cleaned_filters)

    def get_context_data(self, **kwargs):
        columns = [e.column for e in extensions() if e.column is not None]
        can_open = self.request.user.has_perm("hoa.add_complaint")
        context = super().get_context_data(columns=columns, can_open=can_open, **kwargs)
        url = complaint_urls(self.organization)
        for complaint in context["complaints"]:  # the page's rows, read once
            complaint.url = url(complaint.pk)
            complaint.column_cells = [column.cell(complaint) for column in columns]
        return context


_MARKER = BIGINT_MAX  # an id no other part of a complaint's URL spells


def complaint_urls(organization) -> Callable[[int], str]:
    """The URL of an organization's complaint by its id: ``reverse`` once, the id written
    in, for a list's rows (``reverse`` cost as much as the rest of a row's cells)."""
    parts = reverse("complaints:complaint", args=[organization.slug, _MARKER]).split(str(_MARKER))
    if len(parts) != 2:  # a slug that spells the marker: each URL reversed
        return lambda pk: reverse("complaints:complaint", args=[organization.slug, pk])
    before, after = parts
    return lambda pk: f"{before}{int(pk)}{after}"


class NewComplaintView(OrganizationMixin, TemplateView):
    """``GET …/complaints/new/``: the form; ``POST``: open the complaint and 303 to it, or
    400 with the form and its errors (nothing created). Needs ``hoa.add_complaint``."""

    template_name = "hoa/complaints/complaint_new.html"
    permission_required = "hoa.add_complaint"
    http_method_names = ["get", "head", "post"]

    def get(self, request, *args, **kwargs):
        form = ComplaintForm(organization=self.organization)
        return self.render_to_response(self.get_context_data(form=form))

    def post(self, request, *args, **kwargs):
        form = ComplaintForm(request.POST, organization=self.organization)
        if not form.is_valid():
            return self.render_to_response(self.get_context_data(form=form), status=400)
        data = form.cleaned_data
        complaint = workflow.open_complaint(
            organization=self.organization,
            unit=data["unit"],
            title=data["title"],
            description=data["description"],
            priority=data["priority"],
            reporter=workflow.Reporter(
                data["reporter_name"], data["reporter_email"], data["reporter_phone"]
            ),
            actor=request.user,
        )
        messages.success(request, answers.opened(complaint))
        url = reverse("complaints:complaint", args=[self.organization.slug, complaint.pk])
        return see_other(url)


class ComplaintDetailView(OrganizationMixin, DetailView):
    """One complaint: its facts, the workflow's forms, the operations' sections, the
    timeline."""

    template_name = "hoa/complaints/complaint_detail.html"
    context_object_name = "complaint"

    def get_queryset(self):
        # A complaint of another organization under this organization's URL is a 404.
        return Complaint.objects.for_organization(self.organization).select_related(
            "unit", "organization"
        )

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        complaint = self.object
        sections = [e.section for e in extensions() if e.section is not None]
        for section in sections:  # a subclass's own values (a form with errors) win
            for name, value in section.context(self.request, complaint).items():
                context.setdefault(name, value)
        offered = workflow.choices_from(complaint.status, assigned=assigned(complaint))
        context.setdefault(
            "status_form",
            ComplaintStatusForm(offered=offered, initial={"from_status": complaint.status}),
        )
        context.setdefault("note_form", ComplaintNoteForm())
        context.setdefault(
            "sla_form",
            ComplaintSlaForm(
                initial={
                    "due_at": timezone.localtime(complaint.sla_due_at),
                    "seen_due": int(complaint.sla_due_at.timestamp()),
                }
            )
            if complaint.sla_due_at
            else ComplaintSlaForm(),
        )
        context.update(
            sections=sections,
            timeline=selectors.timeline(complaint),
            can_change=self.request.user.has_perm(CHANGE_PERMISSION),
            sla_changes=allows(Change.SLA, complaint.status),  # the rule table's say
        )
        return context

    def complaint_url(self, complaint) -> str:
        return reverse("complaints:complaint", args=[self.organization.slug, complaint.pk])


class ComplaintActionView(ComplaintDetailView):
    """Base of the workflow's POST endpoints; a GET is a 303 to the complaint page."""

    permission_required = CHANGE_PERMISSION
    http_method_names = ["get", "head", "post"]
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
        except ComplaintsError as exc:
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

    def make_form(self, data):
        self.assigned = assigned(self.object)
        offered = workflow.choices_from(self.object.status, assigned=self.assigned)
        return self.form_class(data, offered=offered)

    def apply(self, complaint, data) -> str:
        change = workflow.change_status(
            complaint=complaint,
            seen=data["from_status"],
            to=data["to_status"],
            note=data["note"],
            actor=self.request.user,
            assigned=self.assigned,
        )
        return answers.status_changed(complaint, change.to)

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
            seen_due=data["seen_due"],
        )
        return _("The SLA of complaint #%(complaint)s is due %(due)s now.") % {
            "complaint": complaint.pk,
            "due": when(data["due_at"]),
        }
