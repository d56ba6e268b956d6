"""Staff pages: complaints with their vendor, the assign form, and the vendors' contracts.

The assign view is thin: it resolves the organization (404 unless staff of it), checks the
permission (403), finds the complaint inside that organization (404), validates the form
(400), calls ``assign_vendor`` once and turns its answer into a page.

The form carries the assignment the page showed (``replacing``); a reassignment replaces
that one only, and a 409 page that shows a newer one offers to replace it knowingly.
"""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views.generic import DetailView, ListView

from hoa.models import Complaint
from hoa.security.ratelimits import limit_fenced_posts
from hoa.web.access import OrganizationMixin, client_ip
from hoa.web.responses import conflict, error_page
from locking import LockHeld, LockUnavailable, StaleFencingToken
from vendors import selectors
from vendors.answers import describe_assignment, refusal_message, result_message
from vendors.forms import AssignVendorForm
from vendors.services import (
    ASSIGN_PERMISSION,
    OPERATION,
    AlreadyAssigned,
    AssignmentChanged,
    ChangedSinceViewed,
    ContractNotActive,
    DispatchFailed,
    NotAllowed,
    assign_vendor,
)


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
    past the rate limit."""

    http_method_names = ["post"]
    permission_required = ASSIGN_PERMISSION
    operation = OPERATION

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
        except ContractNotActive as exc:
            form.add_error("vendor", refusal_message(complaint, exc))
            return self.render_to_response(self.get_context_data(form=form), status=400)
        except NotAllowed as exc:
            raise PermissionDenied from exc
        except (
            LockHeld,
            StaleFencingToken,
            AlreadyAssigned,
            ChangedSinceViewed,
            AssignmentChanged,
        ) as exc:
            return self.conflict(complaint, vendor, reassign, exc, form)
        except DispatchFailed as exc:
            return error_page(
                request, 502, _("Vendor dispatch failed"), refusal_message(complaint, exc)
            )
        except LockUnavailable as exc:
            return error_page(
                request, 503, _("Lock service unavailable"), refusal_message(complaint, exc)
            )
        level = messages.INFO if result.already_done else messages.SUCCESS
        messages.add_message(request, level, result_message(result))
        return _see_other(self.complaint_url(complaint))

    def conflict(self, complaint, vendor, reassign, exc, form):
        """The loser's 409: who holds the lease or which assignment won, and a retry.

        The retry replaces the assignment this page names (the person has now seen it),
        else the one the refused form had shown.
        """
        message, winner = refusal_message(complaint, exc), None
        if isinstance(exc, LockHeld):
            title = _("Assignment in progress")
        elif isinstance(exc, AlreadyAssigned):
            title = _("This complaint already has a vendor")
            message = _(
                "Nothing was changed. To send %(vendor)s instead, tick “replace the current "
                "vendor” and try again."
            ) % {"vendor": vendor.name}
            winner = exc.winner
        elif isinstance(exc, ChangedSinceViewed):
            title = _("Changed since you looked")
            message = _conflict_message(vendor, exc)
            winner = exc.current
        elif isinstance(exc, AssignmentChanged):
            title = _("The vendor changed meanwhile")
            winner = exc.current
        else:  # StaleFencingToken: name the assignment that won
            title = _("A newer assignment took over")
            winner = selectors.active_assignment(complaint)
        if winner is not None or isinstance(exc, ChangedSinceViewed):
            retry_replacing = _field_value(winner)
        elif form.carries_shown_assignment:
            retry_replacing = _field_value(form.cleaned_data["replacing"])
        else:
            retry_replacing = None  # the retry, like this request, names nothing
        return conflict(
            self.request,
            title=title,
            message=message,
            lease=exc if isinstance(exc, LockHeld) else None,
            winner=(
                _("Current vendor: %(assignment)s.") % {"assignment": describe_assignment(winner)}
                if winner
                else None
            ),
            retry_url=self.request.path,
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


def _conflict_message(vendor, exc: ChangedSinceViewed) -> str:
    if exc.current is None:
        return _(
            "Nothing was changed: the vendor you saw is no longer assigned, and the complaint "
            "has no vendor now. Try again to send %(vendor)s knowingly."
        ) % {"vendor": vendor.name}
    return _(
        "Nothing was changed: since you looked, %(current)s has been assigned. Try again to "
        "replace %(current)s with %(vendor)s knowingly."
    ) % {"current": exc.current.vendor.name, "vendor": vendor.name}


def _see_other(url: str) -> HttpResponseRedirect:
    """A 303: the browser follows it with a GET, so a reload does not resend the POST."""
    response = HttpResponseRedirect(url)
    response.status_code = 303
    return response
