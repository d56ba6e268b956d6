"""The forms' renderer writes inputs, menus, text areas and labels in Python
(``hoa.web.widget_html``): the same HTML as Django's templates, character for character,
for every widget the pages render and for the values that take the templates' other
branches (escaping, safe strings, lazy labels, numbers, optgroups, flags)."""

import datetime
from decimal import Decimal

import pytest
from django import forms
from django.forms.renderers import DjangoTemplates
from django.utils import translation
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy

from hoa.complaints.forms import (
    ComplaintFilterForm,
    ComplaintForm,
    ComplaintNoteForm,
    ComplaintSlaForm,
    ComplaintStatusForm,
)
from hoa.models import Complaint
from hoa.web import widget_html
from hoa.web.fields import FormRenderer
from vendors.forms import AssignVendorForm, VendorSelect

DJANGO = DjangoTemplates()
TRICKY = "a<b> & \"c\" 'd'"
ATTRS = {
    "required": True,
    "disabled": False,
    "maxlength": 20,
    "placeholder": gettext_lazy("Title or unit"),
    "data-x": mark_safe('<i class="y">'),
    "data-t": ("a", 1),
    "title": TRICKY,
}


def both(widget: forms.Widget, value, attrs=None) -> tuple[str, str]:
    return (
        widget.render("field", value, attrs=attrs, renderer=DJANGO),
        widget.render("field", value, attrs=attrs, renderer=FormRenderer()),
    )


VALUES = [None, "", "plain", TRICKY, mark_safe("<b>safe</b>"), 5, Decimal("1250.50"),
          gettext_lazy("Choose…"), "line 1\nline 2"]  # fmt: skip
INPUTS = [forms.TextInput, forms.HiddenInput, forms.EmailInput, forms.NumberInput,
          forms.PasswordInput, forms.DateInput, forms.DateTimeInput, forms.SearchInput,
          forms.URLInput, forms.TelInput]  # fmt: skip


@pytest.mark.parametrize("widget_class", INPUTS)
@pytest.mark.parametrize("value", VALUES)
def test_inputs_are_djangos_html(widget_class, value):
    for attrs in (None, ATTRS, {"type": "search", "id": "id_q"}):
        django, ours = both(widget_class(attrs=attrs), value)
        assert ours == django


@pytest.mark.parametrize("value", [None, "", True, False, "on", TRICKY])
def test_checkboxes_are_djangos_html(value):
    django, ours = both(forms.CheckboxInput(attrs={"id": "id_c"}), value)
    assert ours == django


@pytest.mark.parametrize("value", VALUES)
def test_text_areas_are_djangos_html(value):
    for attrs in (None, ATTRS, {"rows": 3, "cols": "40"}):
        django, ours = both(forms.Textarea(attrs=attrs), value)
        assert ours == django


CHOICES = [
    ("", gettext_lazy("Choose…")),
    ("new", "New"),
    (TRICKY, TRICKY),
    (3, "Three"),
    ("n", 7),  # a number as the label: the template localizes it
    ("safe", mark_safe("<b>safe</b>")),
    (None, "none"),
]
GROUPED = [("", "—"), ("Group <1>", [("a", "A"), ("b", "B & b")]), ("c", "C"),
           (gettext_lazy("Lazy"), [("d", "D")])]  # fmt: skip


@pytest.mark.parametrize("choices", [CHOICES, GROUPED, [], [("only", "Only")]])
@pytest.mark.parametrize("value", [None, "", "new", TRICKY, 3, "a", ["b", "d"]])
def test_menus_are_djangos_html(choices, value):
    for widget in (
        forms.Select(choices=choices),
        forms.Select(choices=choices, attrs=ATTRS),
        forms.SelectMultiple(choices=choices, attrs={"id": "id_m"}),
        *([] if isinstance(value, list) else [forms.NullBooleanSelect()]),
    ):
        django, ours = both(widget, value)
        assert ours == django
    vendors = VendorSelect(choices=choices)
    vendors.disabled_values = {"new", "a"}
    django, ours = both(vendors, value)
    assert ours == django


class Labelled(forms.Form):
    required_css_class = "required"
    name = forms.CharField(label=TRICKY)
    lazy = forms.CharField(label=gettext_lazy("Note"), required=False)
    safe = forms.CharField(label=mark_safe("<i>Safe</i>"), label_suffix="")
    asked = forms.CharField(label="Why?")
    spaced = forms.CharField(label=" Spaced ")
    unnamed = forms.CharField()


@pytest.mark.parametrize("auto_id", ["id_%s", False])
def test_labels_are_djangos_html(auto_id):
    form = Labelled(auto_id=auto_id, renderer=DJANGO)
    ours = Labelled(auto_id=auto_id, renderer=FormRenderer())
    for name in form.fields:
        assert ours[name].label_tag() == form[name].label_tag()
        assert ours[name].legend_tag() == form[name].legend_tag()
        attrs = {"class": "x", "hidden": True, "data-y": TRICKY}
        assert ours[name].label_tag(attrs=attrs) == form[name].label_tag(attrs=attrs)
        assert ours[name].label_tag("<b>x</b>") == form[name].label_tag("<b>x</b>")
    assert str(ours) == str(form)  # the whole form, through Django's div.html


@pytest.mark.django_db
def test_the_pages_forms_are_djangos_html(maple, pipe, green, monkeypatch):
    through_templates = []
    render = DjangoTemplates.render

    def recorded(self, template_name, context, request=None):
        if isinstance(self, FormRenderer):
            through_templates.append(template_name)
        return render(self, template_name, context, request=request)

    monkeypatch.setattr(DjangoTemplates, "render", recorded)
    complaint = Complaint.objects.create(organization=maple, unit=maple.units.first(), title="T")
    due = datetime.datetime(2026, 3, 8, 7, 30, tzinfo=datetime.UTC)
    made = [
        lambda **r: ComplaintForm(organization=maple, **r),
        lambda **r: ComplaintForm({"title": TRICKY, "unit": "x"}, organization=maple, **r),
        lambda **r: ComplaintStatusForm(
            offered=[("assigned", "Assigned"), ("closed", "Closed")],
            initial={"from_status": "new"},
            **r,
        ),
        lambda **r: ComplaintStatusForm({"from_status": "new", "note": TRICKY}, **r),
        lambda **r: ComplaintNoteForm(**r),
        lambda **r: ComplaintSlaForm(initial={"due_at": due, "seen_due": 5}, **r),
        lambda **r: ComplaintFilterForm({"q": TRICKY, "sort": "due"}, organization=maple, **r),
        lambda **r: AssignVendorForm(
            organization=maple, complaint=complaint, initial={"seen_status": "new"}, **r
        ),
    ]
    for language in ("en", "fr"):
        with translation.override(language):
            for make in made:
                django, ours = make(renderer=DJANGO), make(renderer=FormRenderer())
                django.is_bound and django.is_valid() and ours.is_valid()
                for name in django.fields:
                    assert str(ours[name]) == str(django[name])
                    assert ours[name].label_tag() == django[name].label_tag()
                assert str(ours) == str(django)
    # Every input, menu, text area and label of these forms was written, none rendered.
    assert through_templates
    assert not [
        name
        for name in through_templates
        if name.startswith("django/forms/widgets/") or name == "django/forms/label.html"
    ]


def test_it_writes_djangos_own_templates_and_leaves_the_rest_to_them():
    renderer = FormRenderer()
    assert renderer._writer("django/forms/widgets/select.html") is widget_html.select_html
    assert renderer._writer("django/forms/widgets/hidden.html") is widget_html.input_html
    assert renderer._writer("django/forms/widgets/checkbox.html") is widget_html.input_html
    assert renderer._writer("django/forms/widgets/textarea.html") is widget_html.textarea_html
    assert renderer._writer("django/forms/label.html") is widget_html.label_html
    assert renderer._writer("django/forms/widgets/radio.html") is None
    assert renderer._writer("django/forms/widgets/no_such.html") is None
    assert renderer._writer("django/forms/div.html") is None

    class Overridden(FormRenderer):  # a project's own select.html: its template renders
        def _source(self, template_name):
            source = super()._source(template_name)
            return source + "<!-- ours -->" if template_name.endswith("select.html") else source

    assert Overridden()._writer("django/forms/widgets/select.html") is None
    assert Overridden()._writer("django/forms/widgets/text.html") is widget_html.input_html
