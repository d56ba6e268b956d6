from django import forms
from django.utils.translation import gettext_lazy as _

from hoa.complaints import NOTE_MAX_LENGTH
from hoa.models import Complaint, Organization
from hoa.web.fields import IdChoiceField
from vendors.models import Vendor, VendorAssignment


class AssignVendorForm(forms.Form):
    """The vendor to send to a complaint, for the staff page and the admin action.

    On the staff page (``complaint`` given) the form also carries the assignment the page
    showed, in the hidden ``replacing`` field (empty when it showed none): a reassignment
    replaces that one only. The admin action assigns many complaints with one form and
    goes without it.
    """

    vendor = IdChoiceField(
        queryset=Vendor.objects.none(),
        label=_("Vendor"),
        empty_label=_("Choose a vendor…"),
        error_messages={
            "required": _("Choose a vendor."),
            "invalid_choice": _("Choose a vendor that has a contract with this association."),
        },
    )
    reassign = forms.BooleanField(
        required=False,
        label=_("Replace the current vendor"),
        help_text=_("Without this, a complaint that already has a vendor keeps it."),
    )
    replacing = IdChoiceField(
        queryset=VendorAssignment.objects.none(),
        required=False,
        widget=forms.HiddenInput,
        error_messages={
            "invalid_choice": _("This page was out of date. Reload it and choose again."),
        },
    )

    def __init__(
        self, *args, organization: Organization, complaint: Complaint | None = None, **kwargs
    ):
        super().__init__(*args, **kwargs)
        field = self.fields["vendor"]
        # Validation accepts every vendor the association has a contract with, so that an
        # ended or future contract gets its own answer (with its dates) from the service;
        # the menu offers only the vendors whose contract covers today. Malformed and
        # unknown ids, and other associations' vendors, are invalid choices.
        field.queryset = Vendor.objects.filter(contracts__organization=organization).distinct()
        active = Vendor.objects.with_active_contract(organization).order_by("name")
        # A callable: the menu's query runs when a page renders it, not for every POST.
        field.choices = lambda: [("", field.empty_label), *((v.pk, _label(v)) for v in active)]
        if complaint is None:
            del self.fields["replacing"]
        else:
            # Any of this complaint's assignments, replaced ones too: a page shown before
            # a reassignment carries an assignment that is no longer active, and that is
            # the case the service must refuse, not the form.
            self.fields["replacing"].queryset = complaint.assignments.select_related("vendor")

    @property
    def carries_shown_assignment(self) -> bool:
        """Whether the POST carried ``replacing`` (the page's form always does; a client
        posting without it showed nothing, and is treated like the command)."""
        return "replacing" in self.fields and self.add_prefix("replacing") in self.data


def _label(vendor: Vendor) -> str:
    return f"{vendor.name} ({vendor.trade})" if vendor.trade else vendor.name


# -- the complaint workflow (hoa.complaints) on the complaint page -------------------------

Status = Complaint.Status
OUT_OF_DATE = _("This page was out of date. Reload it and try again.")


class ComplaintStatusForm(forms.Form):
    """A status change: the status the page showed (hidden), the new one, a note.

    Any status validates here, so that a rule the change breaks gets its own sentence from
    ``hoa.complaints``; the menu offers only the changes the rules allow from the status
    shown (``offered``).
    """

    from_status = forms.ChoiceField(
        choices=Status.choices,
        widget=forms.HiddenInput,
        error_messages={"required": OUT_OF_DATE, "invalid_choice": OUT_OF_DATE},
    )
    to_status = forms.ChoiceField(
        choices=Status.choices,
        label=_("New status"),
        error_messages={
            "required": _("Choose the new status."),
            "invalid_choice": _("Choose a status from the list."),
        },
    )
    note = forms.CharField(
        required=False,
        label=_("Note"),
        max_length=NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("Required to resolve, to close an unresolved complaint and to reopen."),
        error_messages={"max_length": _("Keep the note under %(limit_value)s characters.")},
    )

    def __init__(self, *args, offered: list[tuple[str, str]] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["to_status"].widget.choices = [("", _("Choose…")), *offered]


class ComplaintNoteForm(forms.Form):
    note = forms.CharField(
        label=_("Note"),
        max_length=NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3}),
        error_messages={
            "required": _("Write the note first."),
            "max_length": _("Keep the note under %(limit_value)s characters."),
        },
    )


class ComplaintSlaForm(forms.Form):
    due_at = forms.DateTimeField(
        label=_("New SLA due time"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        error_messages={
            "required": _("Give the new SLA due time."),
            "invalid": _("Give the new SLA due time as a date and a time."),
        },
    )
    reason = forms.CharField(
        label=_("Reason"),
        max_length=NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={
            "required": _("Say why the SLA due time changes."),
            "max_length": _("Keep the reason under %(limit_value)s characters."),
        },
    )


# -- list filters: plain GET forms; a parameter that does not validate is a 400 -----------

UNASSIGNED = "none"
# The complaint list's sort orders: the value in the URL -> the ordering.
COMPLAINT_SORTS = {
    "-opened": ("-opened_at", "-pk"),
    "opened": ("opened_at", "pk"),
    "due": ("sla_due_at", "pk"),
    "priority": ("priority_rank", "sla_due_at", "pk"),
    "title": ("title", "pk"),
}
UNRESOLVED = "unresolved"


class ComplaintFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=100,
        label=_("Search"),
        widget=forms.TextInput(attrs={"type": "search", "placeholder": _("Title or unit")}),
        error_messages={"max_length": _("Search for at most %(limit_value)s characters.")},
    )
    status = forms.ChoiceField(
        required=False,
        label=_("Status"),
        choices=[("", _("Any status")), (UNRESOLVED, _("Not resolved yet")), *Status.choices],
        error_messages={"invalid_choice": _("Choose a status from the list.")},
    )
    priority = forms.ChoiceField(
        required=False,
        label=_("Priority"),
        choices=[("", _("Any priority")), *Complaint.Priority.choices],
        error_messages={"invalid_choice": _("Choose a priority from the list.")},
    )
    overdue = forms.ChoiceField(
        required=False,
        label=_("SLA"),
        choices=[("", _("Any")), ("yes", _("Past SLA")), ("no", _("Within SLA"))],
        error_messages={"invalid_choice": _("Choose past SLA or within SLA.")},
    )
    vendor = forms.ChoiceField(
        required=False,
        label=_("Vendor"),
        error_messages={"invalid_choice": _("Choose a vendor of this association.")},
    )
    sort = forms.ChoiceField(
        required=False,
        label=_("Sort by"),
        choices=[
            ("-opened", _("Newest first")),
            ("opened", _("Oldest first")),
            ("due", _("SLA due soonest")),
            ("priority", _("Priority")),
            ("title", _("Title")),
        ],
        error_messages={"invalid_choice": _("Choose a sort order from the list.")},
    )

    def __init__(self, *args, organization: Organization, **kwargs):
        super().__init__(*args, **kwargs)
        vendors = Vendor.objects.filter(contracts__organization=organization).distinct()
        self.fields["vendor"].choices = [
            ("", _("Any vendor")),
            (UNASSIGNED, _("Unassigned")),
            *((str(pk), name) for pk, name in vendors.order_by("name").values_list("pk", "name")),
        ]


class VendorFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=100,
        label=_("Search"),
        widget=forms.TextInput(attrs={"type": "search", "placeholder": _("Name or trade")}),
        error_messages={"max_length": _("Search for at most %(limit_value)s characters.")},
    )


def first_error(form: forms.Form) -> str:
    """The one sentence a 400 page shows for a form that did not validate."""
    return next(iter(form.errors.values()))[0]
