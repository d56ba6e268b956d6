"""Django's simplest form templates written in Python: the same HTML, character for
character, without the template engine.

A staff page renders its forms' inputs, menus, text areas and labels through Django's
widget templates: one template per widget, a second for its attributes, and one more per
option of a menu (the new complaint form's unit menu has one per unit, 200 on a large
association), which cost more than the rest of the page. ``FormRenderer``
(``hoa.web.fields``) writes these templates' HTML here instead, when the templates it
would have rendered are Django's own, unchanged (``stands_in_for``: their source is the
one written out below, so an override or another Django version renders as before), and
every value the template would have localized is a string; anything else goes to the
templates. ``tests/pages/test_widget_html.py`` renders both ways and compares.
"""

from html import escape

from django.utils.functional import Promise
from django.utils.safestring import SafeData

WIDGETS = "django/forms/widgets/"
ATTRS = WIDGETS + "attrs.html"
INPUT = WIDGETS + "input.html"
SELECT = WIDGETS + "select.html"
OPTION = WIDGETS + "select_option.html"
TEXTAREA = WIDGETS + "textarea.html"
LABEL = "django/forms/label.html"
LABEL_ATTRS = "django/forms/attrs.html"

# The sources these functions stand in for (Django 5.2's), each with the templates it
# includes. A widget template that only includes input.html is an input.
_ATTRS = (
    "{% for name, value in widget.attrs.items %}{% if value is not False %} {{ name }}"
    "{% if value is not True %}=\"{{ value|stringformat:'s' }}\"{% endif %}{% endif %}"
    "{% endfor %}"
)
SOURCES = {
    ATTRS: _ATTRS,
    INPUT: '<input type="{{ widget.type }}" name="{{ widget.name }}"{% if widget.value != None %}'
    " value=\"{{ widget.value|stringformat:'s' }}\"{% endif %}"
    '{% include "django/forms/widgets/attrs.html" %}>\n',
    SELECT: '<select name="{{ widget.name }}"{% include "django/forms/widgets/attrs.html" %}>'
    "{% for group_name, group_choices, group_index in widget.optgroups %}{% if group_name %}\n"
    '  <optgroup label="{{ group_name }}">{% endif %}{% for option in group_choices %}\n'
    "  {% include option.template_name with widget=option %}{% endfor %}{% if group_name %}\n"
    "  </optgroup>{% endif %}{% endfor %}\n</select>\n",
    OPTION: "<option value=\"{{ widget.value|stringformat:'s' }}\""
    '{% include "django/forms/widgets/attrs.html" %}>{{ widget.label }}</option>\n',
    TEXTAREA: '<textarea name="{{ widget.name }}"{% include "django/forms/widgets/attrs.html" %}>'
    "\n{% if widget.value %}{{ widget.value }}{% endif %}</textarea>\n",
    LABEL: "{% if use_tag %}<{{ tag }}{% include 'django/forms/attrs.html' %}>{{ label }}"
    "</{{ tag }}>{% else %}{{ label }}{% endif %}\n",
    LABEL_ATTRS: _ATTRS.replace("widget.attrs.items", "attrs.items"),
}
INCLUDES_INPUT = '{% include "django/forms/widgets/input.html" %}\n'


class Unwritten(Exception):
    """A value the template would have localized or looked up differently: the template
    renders it."""


def _text(value) -> str:
    """``{{ value }}`` of a string, escaped unless it is safe."""
    if isinstance(value, Promise):
        value = str(value)
    elif not isinstance(value, str):
        raise Unwritten  # a number, a date…: localized by the template; a callable: called
    return value if isinstance(value, SafeData) else escape(value)


def _formatted(value) -> str:
    """``{{ value|stringformat:'s' }}``: ``%s`` of any value, escaped unless it is safe."""
    if callable(value):
        raise Unwritten  # the template would call it first
    text = "%s" % (str(value) if isinstance(value, tuple) else value)
    return text if isinstance(value, SafeData) else escape(text)


def _attrs(attrs) -> str:
    if not attrs:
        return ""
    if "items" in attrs:
        raise Unwritten  # the template would read attrs["items"]
    return "".join(
        f" {_text(name)}" if value is True else f' {_text(name)}="{_formatted(value)}"'
        for name, value in attrs.items()
        if value is not False
    )


def input_html(context) -> str:
    widget = context["widget"]
    value = widget["value"]
    shown = "" if value is None else f' value="{_formatted(value)}"'
    kind, name = _text(widget["type"]), _text(widget["name"])
    return f'<input type="{kind}" name="{name}"{shown}{_attrs(widget["attrs"])}>'


def select_html(context) -> str:
    widget = context["widget"]
    parts = [f'<select name="{_text(widget["name"])}"{_attrs(widget["attrs"])}>']
    for group_name, group_choices, _index in widget["optgroups"]:
        if group_name:
            parts.append(f'\n  <optgroup label="{_text(group_name)}">')
        for option in group_choices:
            if option["template_name"] != OPTION:
                raise Unwritten
            parts.append(
                f'\n  <option value="{_formatted(option["value"])}"{_attrs(option["attrs"])}>'
                f"{_text(option['label'])}</option>\n"
            )
        if group_name:
            parts.append("\n  </optgroup>")
    parts.append("\n</select>")
    return "".join(parts)


def textarea_html(context) -> str:
    widget = context["widget"]
    value = widget["value"]
    shown = _text(value) if value else ""
    return f'<textarea name="{_text(widget["name"])}"{_attrs(widget["attrs"])}>\n{shown}</textarea>'


def label_html(context) -> str:
    label = _text(context["label"])
    if not context["use_tag"]:
        return label.strip()
    tag = _text(context["tag"])
    return f"<{tag}{_attrs(context['attrs'])}>{label}</{tag}>"


# What each function stands in for: its template and the templates that one includes.
WRITERS = {
    INPUT: (input_html, (INPUT, ATTRS)),
    SELECT: (select_html, (SELECT, OPTION, ATTRS)),
    TEXTAREA: (textarea_html, (TEXTAREA, ATTRS)),
    LABEL: (label_html, (LABEL, LABEL_ATTRS)),
}
