"""Forms of the complaint pages: a status change, a note, an SLA change, the list's filters.

A form validates the shape of what was posted; the workflow (``hoa.complaints.workflow``)
decides whether the change is allowed and says why not.
"""

from django import forms
from django.utils.translation import gettext_lazy as _

from hoa.complaints.extensions import extensions
from hoa.complaints.selectors import UNRESOLVED
from hoa.complaints.workflow import NOTE_MAX_LENGTH
from hoa.dates import zone_label
from hoa.models import Complaint, Organization, Unit
from hoa.web.fields import AsciiDateTimeField, IdChoiceField, has_control_characters, one_line

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


def _printable(value: str) -> str:
    """``value``, refused if it holds a control character (a NUL, an escape…)."""
    if has_control_characters(value):
        raise forms.ValidationError(_("Remove the control characters from this text."))
    return value


class ComplaintForm(forms.Form):
    """A complaint opened from the staff pages: what, where, how urgent, and who reported
    it. ``unit`` is optional (a common area) but must be one of the association's."""

    unit = IdChoiceField(
        queryset=Unit.objects.none(),
        required=False,
        label=_("Unit"),
        empty_label=_("No unit (a common area)"),
        error_messages={"invalid_choice": _("Choose a unit of this association.")},
    )
    title = forms.CharField(label=_("Title"), max_length=200, validators=[one_line])
    description = forms.CharField(
        label=_("What is wrong"),
        max_length=NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 4}),
    )
    priority = forms.ChoiceField(
        label=_("Priority"),
        choices=Complaint.Priority.choices,
        initial=Complaint.Priority.NORMAL,
        error_messages={"invalid_choice": _("Choose a priority from the list.")},
    )
    reporter_name = forms.CharField(label=_("Reported by"), max_length=200, validators=[one_line])
    reporter_email = forms.EmailField(label=_("Their email"), max_length=254)
    reporter_phone = forms.RegexField(
        label=_("Their phone"),
        required=False,
        max_length=30,
        regex=r"^\+?[0-9 ()./-]{3,30}$",
        error_messages={"invalid": _("Give a phone number of digits, spaces and + ( ) - .")},
    )

    def __init__(self, *args, organization: Organization, **kwargs):
        super().__init__(*args, **kwargs)
        # Each option's label names the association (Unit.__str__): read with the units,
        # not once per option.
        units = Unit.objects.for_organization(organization).select_related("organization")
        self.fields["unit"].queryset = units.order_by("label")

    def clean_title(self):
        return _printable(self.cleaned_data["title"].strip())

    def clean_description(self):
        return _printable(self.cleaned_data["description"].strip())

    def clean_reporter_name(self):
        return _printable(self.cleaned_data["reporter_name"].strip())


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
    """A new SLA due time (ASCII digits, read in the association's zone) and the reason.
    The workflow decides whether the time is allowed (after opening, at most
    ``SLA_MAX_AHEAD`` from now)."""

    due_at = AsciiDateTimeField(
        label=_("New SLA due time"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"],
        # A text input, not datetime-local: the browser draws that in its locale's way
        # ("11/21/2026, 04:05 AM" in en-US), where every other time here is ISO 24-hour.
        widget=forms.DateTimeInput(
            attrs={
                "placeholder": "YYYY-MM-DD HH:MM",
                "pattern": r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}",
                "autocomplete": "off",
                "spellcheck": "false",
            },
            format="%Y-%m-%d %H:%M",
        ),
        error_messages={
            "required": _("Give the new SLA due time."),
            "invalid": _(
                "Give the new SLA due time as a date and a time, such as 2026-11-21 16:05 "
                "(24-hour)."
            ),
        },
    )
    # The due time the page showed (seconds since the epoch): the change is a
    # compare-and-swap on it, so a newer change made meanwhile is never overwritten unseen.
    seen_due = forms.IntegerField(
        widget=forms.HiddenInput,
        min_value=0,
        max_value=2**40,
        error_messages={"required": _("This page was out of date. Reload it.")},
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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The zone the time is read in, beside the input (the association's, active here).
        self.fields["due_at"].help_text = zone_label()
        self.fields["due_at"].widget.attrs["aria-describedby"] = "sla-zone"

    def clean_reason(self):
        return _printable(self.cleaned_data["reason"])


# -- list filters: plain GET forms; a parameter that does not validate is a 400 -----------


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
        # The operations' filters (the vendor), before the sort order.
        sort = self.fields.pop("sort")
        for extension in extensions():
            if extension.filter is not None:
                self.fields[extension.filter.name] = extension.filter.field(organization)
        self.fields["sort"] = sort
