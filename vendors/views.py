"""Staff pages: complaints with their vendor, the assign form, and the vendors' contracts.

The assign view is thin: it resolves the organization (404 unless staff of it), checks the
permission (403), finds the complaint inside that organization (404), validates the form
(400), calls ``assign_vendor`` once and turns its answer into a page.

The form carries the assignment the page showed (``replacing``); a reassignment replaces
that one only, and a 409 page that shows a newer one offers to replace it knowingly.
"""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views.generic import DetailView, ListView

from hoa.models import Complaint
from hoa.security.ratelimits import limit_fenced_posts
from hoa.web import answer_table
from hoa.web.access import OrganizationMixin, client_ip
from hoa.web.answer_table import Answer
from vendors import answers, selectors
from vendors.exceptions import (
    AlreadyAssigned,
    AssignmentSuperseded,
    ChangedSinceViewed,
    VendorsError,
)
from vendors.forms import AssignVendorForm
from vendors.resources import ASSIGN_PERMISSION, OPERATION
from vendors.services import assign_vendor


class ComplaintListView(OrganizationMixin, ListView):
    template_name = "vendors/complaint_list.html"
    context_object_name = "complaints"
    paginate_by = 50

    def get_queryset(self):
        complaints = Complaint.objects.for_organization(self.organization).select_related("unit")
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
        context.update(
            current=current,
            history=selectors.assignment_history(complaint),
            can_assign=self.request.user.has_perm(ASSIGN_PERMISSION),
        )
        return context


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
                return self.conflict(complaint, vendor, reassign, exc, form)
            return answer_table.page(request, exc)
        level = messages.INFO if result.already_done else messages.SUCCESS
        messages.add_message(request, level, result.message)
        return _see_other(self.complaint_url(complaint))

    def conflict(self, complaint, vendor, reassign, exc: VendorsError, form):
        """The loser's 409: who holds the lease or which assignment won, and a retry.

        The retry replaces the assignment this page names (the person has now seen it),
        else the one the refused form had shown.
        """
        message, winner = exc.message, getattr(exc, "now_assigned", None)
        if isinstance(exc, AlreadyAssigned):
            message = answers.retry_already_assigned(vendor)
        elif isinstance(exc, ChangedSinceViewed):
            message = answers.retry_changed_since_viewed(vendor, exc.current)
        elif isinstance(exc, AssignmentSuperseded):  # name the assignment that won
            winner = selectors.active_assignment(complaint)
        if winner is not None or isinstance(exc, ChangedSinceViewed):
            retry_replacing = _field_value(winner)
        elif form.carries_shown_assignment:
            retry_replacing = _field_value(form.cleaned_data["replacing"])
        else:
            retry_replacing = None  # the retry, like this request, names nothing
        return answer_table.page(
            self.request,
            exc,
            message=message,
            winner=(
                _("Current vendor: %(assignment)s.")
                % {"assignment": answers.describe_assignment(winner)}
                if winner
                else None
            ),
            template_name="vendors/assign_conflict.html",
            extra_context={
                "organization": self.organization,
                "complaint": complaint,
                "vendor": vendor,
                "reassign": reassign,
                "retry_replacing": retry_replacing,
                "back_url": self.complaint_url(complaint),
            },
        )

    def complaint_url(self, complaint) -> str:
        return reverse("vendors:complaint", args=[self.organization.slug, complaint.pk])


class VendorListView(OrganizationMixin, ListView):
    """The organization's vendors with their contract windows."""

    template_name = "vendors/vendor_list.html"
    context_object_name = "contracts"

    def get_queryset(self):
        return selectors.contracts_of(self.organization)

    def get_context_data(self, **kwargs):
        return super().get_context_data(today=timezone.localdate(), **kwargs)


def _field_value(assignment) -> str:
    """The ``replacing`` field's value for an assignment, empty for none."""
    return str(assignment.pk) if assignment is not None else ""


def _see_other(url: str) -> HttpResponseRedirect:
    """A 303: the browser follows it with a GET, so a reload does not resend the POST."""
    response = HttpResponseRedirect(url)
    response.status_code = 303
    return response
