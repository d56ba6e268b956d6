"""What vendor assignment and vendor payment add to the complaint pages and workflow
(``hoa.complaints``).

Declared in ``ASSIGNMENT`` (``vendors.operations``) as its ``ComplaintExtension``: the
guard that makes "in progress" wait for a vendor, the list's vendor column and filter, the
complaint page's vendor facts and assign form, and the assignments (and the assigned
vendors' insurance lapses) on the timeline. ``PAYMENT`` declares ``INVOICES``: among the
complaint's facts, the invoices its vendors sent, and the way to record one.
"""

from django import forms
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from hoa.complaints.extensions import (
    AssignmentGuard,
    ComplaintExtension,
    ListColumn,
    ListFilter,
    Section,
    TimelineEntry,
)
from hoa.complaints.workflow import Change, allows
from hoa.models import Complaint, Organization
from vendors import closing, invoice_selectors, selectors
from vendors.forms import AssignVendorForm
from vendors.models import Vendor

ASSIGN_PERMISSION = "vendors.assign_vendor"


def vendor_filter(organization: Organization) -> forms.ChoiceField:
    """The list's vendor filter: any, unassigned, or one of the association's vendors."""
    vendors = Vendor.objects.filter(contracts__organization=organization).distinct()
    return forms.ChoiceField(
        required=False,
        label=_("Vendor"),
        choices=[
            ("", _("Any vendor")),
            (selectors.UNASSIGNED, _("Unassigned")),
            *((str(pk), name) for pk, name in vendors.order_by("name").values_list("pk", "name")),
        ],
        error_messages={"invalid_choice": _("Choose a vendor of this association.")},
    )


def vendor_cell(complaint: Complaint) -> str:
    """The list's vendor cell: the active vendor's name (``with_current_vendor``)."""
    return format_html(
        '<td data-label="{}">{}</td>\n',  # a line of its own, as the template's
        gettext("Vendor"),
        complaint.current_vendor_name or gettext("unassigned"),
    )


def section(request, complaint: Complaint) -> dict:
    """The complaint page's vendor: the active one, the assign form carrying it (the
    assignment a reassignment replaces) and the status shown, the history. A complaint the
    rule table lets no vendor be assigned to (a closed one) shows no assign card."""
    history = selectors.assignments_shown(complaint)
    current = next((assignment for assignment in history if assignment.active), None)
    form = AssignVendorForm(
        organization=complaint.organization,
        complaint=complaint,
        initial={"replacing": current, "seen_status": complaint.status},
    )
    change = Change.REASSIGN if current is not None else Change.ASSIGN
    return {
        "current": current,
        "form": form,
        "history": history,
        "can_assign": request.user.has_perm(ASSIGN_PERMISSION),
        "assignable": allows(change, complaint.status),
    }


def timeline(complaint: Complaint) -> list[TimelineEntry]:
    """Every assignment of the complaint, and every lapse of an assigned vendor's insurance
    recorded while it was assigned, as lines of its timeline."""
    history = selectors.assignments_shown(complaint)
    entries = [
        TimelineEntry(
            at=assignment.assigned_at,
            kind="assignment",
            template="vendors/_timeline_assignment.html",
            item=assignment,
        )
        for assignment in history
    ]
    entries += [
        TimelineEntry(
            at=lapse.recorded_at,
            kind="insurance_lapsed",
            template="vendors/_timeline_lapse.html",
            item=lapse,
        )
        for lapse in selectors.lapses_while_assigned(complaint, history)
    ]
    return entries


COMPLAINTS = ComplaintExtension(
    assignment_guard=AssignmentGuard(
        is_assigned=selectors.has_vendor,
        needed=_("Assign a vendor before marking the complaint in progress."),
        on_close=closing.end_on_close,
    ),
    annotate=selectors.with_current_vendor,
    column=ListColumn(header=_("Vendor"), cell=vendor_cell),
    filter=ListFilter(name="vendor", field=vendor_filter, apply=selectors.handled_by),
    section=Section(
        context=section,
        facts="vendors/_complaint_facts.html",
        card="vendors/_complaint_card.html",
    ),
    timeline=timeline,
)


RECORD_INVOICE_PERMISSION = "vendors.add_invoice"


def invoices_section(request, complaint: Complaint) -> dict:
    """The complaint page's invoices: those of its assignments, and whether the viewer
    may record one (the complaint has had a vendor)."""
    return {
        "complaint_invoices": list(invoice_selectors.of_complaint(complaint)),
        "can_record_invoice": request.user.has_perm(RECORD_INVOICE_PERMISSION)
        and bool(selectors.assignments_shown(complaint)),
    }


INVOICES = ComplaintExtension(
    section=Section(context=invoices_section, facts="vendors/_complaint_invoice_facts.html")
)
