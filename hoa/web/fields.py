"""Form fields every staff form shares, the forms' renderer (``FORM_RENDERER``), and the
URL converter of ids: an id has one spelling, in a form (``IdChoiceField``) as in a URL.

``<id:pk>`` is every object id in a staff URL: a canonical positive integer in ASCII
digits, no leading zero, no sign, no space, and within a ``bigint``. Django's ``<int:…>``
serves ``/complaints/01/`` as ``/complaints/1/`` (two addresses for one page, and a way
round anything keyed on the path); here anything but the one spelling is a 404.
"""

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from babel.numbers import get_currency_symbol
from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.forms.renderers import DjangoTemplates
from django.template import TemplateDoesNotExist
from django.urls import register_converter
from django.utils.translation import get_language, to_locale
from django.utils.translation import gettext_lazy as _

from hoa.answers.refusals import Refusal
from hoa.web import widget_html
from hoa.web.money import format_money

_ASCII_ID = re.compile(r"[0-9]{1,19}")
_ERROR_LIST = "django/forms/errors/list/default.html"


BIGINT_MAX = 2**63 - 1


class CanonicalIdConverter:
    regex = "[1-9][0-9]{0,18}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > BIGINT_MAX:
            raise ValueError(value)  # no such row can exist: the URL does not match
        return number

    def to_url(self, value) -> str:
        number = int(value)
        if not 0 < number <= BIGINT_MAX:
            raise ValueError(value)
        return str(number)


def register() -> None:
    """Make ``<id:…>`` available to URLconfs (``HoaConfig.ready``, before any loads)."""
    register_converter(CanonicalIdConverter, "id")


class FormRenderer(DjangoTemplates):
    """Django's renderer, which renders no template for a field's empty error list: a page
    writes ``{{ form.field.errors }}`` beside each field, the template renders nothing for
    none, and rendering it cost two templates per field (14 on a complaint page). Inputs,
    menus, text areas and labels are written in Python (``hoa.web.widget_html``), the same
    HTML as Django's templates of them, when those templates are Django's own."""

    def __init__(self):
        super().__init__()
        self._writers: dict[str, Callable | None] = {}

    def render(self, template_name, context, request=None):
        if template_name == _ERROR_LIST and not context.get("errors"):
            return ""
        writer = self._writers.get(template_name, _UNKNOWN)
        if writer is _UNKNOWN:
            writer = self._writers[template_name] = self._writer(template_name)
        if writer is not None:
            try:
                return writer(context)
            except widget_html.Unwritten:
                pass
        return super().render(template_name, context, request=request)

    def _writer(self, template_name: str) -> Callable | None:
        """The function that writes ``template_name``'s HTML, if the templates it stands in
        for are Django's own as ``widget_html`` wrote them out; ``None`` otherwise."""
        if template_name.startswith(widget_html.WIDGETS) and template_name not in (
            widget_html.WRITERS
        ):
            if self._source(template_name) != widget_html.INCLUDES_INPUT:
                return None
            template_name = widget_html.INPUT  # text.html, hidden.html, checkbox.html…
        if template_name not in widget_html.WRITERS:
            return None
        writer, templates = widget_html.WRITERS[template_name]
        if any(self._source(name) != widget_html.SOURCES[name] for name in templates):
            return None
        return writer

    def _source(self, template_name: str) -> str | None:
        try:
            return self.get_template(template_name).template.source
        except TemplateDoesNotExist:
            return None


_UNKNOWN = object()


class IdChoiceField(forms.ModelChoiceField):
    """A ``ModelChoiceField`` that takes ids in ASCII digits only.

    Django's would look up ``"\\uff11"`` (a fullwidth one) as 1: ``int()`` accepts every
    script's digits. Months already refuse them; every id refuses them the same way, as
    an invalid choice.
    """

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if not _ASCII_ID.fullmatch(str(value)):
            raise forms.ValidationError(
                self.error_messages["invalid_choice"], code="invalid_choice"
            )
        return super().to_python(value)


class ParsedField(forms.CharField):
    """Text read by the operation's own parser (``parse(text)``, as its page and command
    read it): the parsed value, or the sentence of the ``Refusal`` it raises as the field's
    error."""

    def __init__(self, parse, **kwargs):
        self.parse = parse
        super().__init__(**kwargs)

    def clean(self, value):
        text = super().clean(value)
        try:
            return self.parse(text)
        except Refusal as exc:
            raise forms.ValidationError(exc.message, code="invalid") from exc


def has_control_characters(value: str) -> bool:
    """Whether ``value`` holds a control character (a NUL, an escape…) other than the
    line breaks and tabs a text area may send."""
    return any(not char.isprintable() and char not in "\r\n\t" for char in value)


_ASCII_DATETIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2})?")


class AsciiDateTimeField(forms.DateTimeField):
    """A ``DateTimeField`` that takes ``YYYY-MM-DD HH:MM`` (or ``T``) in ASCII digits only.

    ``strptime`` reads every script's digits (full-width ones too) and Django's field let a
    trailing NUL through; both are refused here as an invalid date and time, like the
    month parser refuses them.
    """

    def to_python(self, value):
        if isinstance(value, str):
            if has_control_characters(value):
                raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
            if value.strip() and not _ASCII_DATETIME.fullmatch(value.strip()):
                raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)


# What people type for an amount, in ASCII digits, once the currency's symbol is set aside:
# ``1000``, ``1,000.00``, ``.50``; commas only between groups of three. No exponent ("1e9"),
# no underscore ("1_000"), no other script's digits: ``Decimal()`` reads all three, and each
# has turned a typo into an amount.
_MONEY = re.compile(r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+")


def _without_symbol(text: str) -> str:
    """``text`` without the deployment's currency symbol, before or after the number."""
    locale = to_locale(get_language() or settings.LANGUAGE_CODE)
    for symbol in {get_currency_symbol(settings.CURRENCY, locale=locale), "$"}:
        if text.startswith(symbol):
            return text[len(symbol) :].strip()
        if text.endswith(symbol):
            return text[: -len(symbol)].strip()
    return text


class MoneyField(forms.DecimalField):
    """An amount as people type it (``1000``, ``1,000.00``, ``$1,000.00``), one sentence per
    mistake, the limits said as amounts. Every form that takes money uses it; the admin
    through ``ADMIN_FORMFIELDS``."""

    widget = forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off"})
    default_error_messages = {
        "invalid": _("Enter an amount as digits, such as 1,250.00 or $1,250.00."),
        "max_decimal_places": _("The amount has at most two decimals (cents)."),
    }

    def __init__(self, *, max_digits=12, decimal_places=2, **kwargs):
        super().__init__(max_digits=max_digits, decimal_places=decimal_places, **kwargs)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if isinstance(value, Decimal | int):
            return Decimal(value)
        text = str(value).strip()
        sign, text = ("-", text[1:].strip()) if text.startswith("-") else ("", text)
        text = _without_symbol(text)
        if not _MONEY.fullmatch(text):
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        try:
            return Decimal(sign + text.replace(",", ""))
        except InvalidOperation:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None

    def run_validators(self, value):
        """The first rule broken, in one sentence (Django's would add the digit count's to
        the maximum's, in its own words)."""
        if value in self.empty_values:
            return
        if self.max_value is not None and value > self.max_value:
            raise ValidationError(
                _("The amount must be at most %(max)s.") % {"max": format_money(self.max_value)},
                code="max_value",
            )
        if self.min_value is not None and value < self.min_value:
            raise ValidationError(_below(self.min_value), code="min_value")
        for validator in self.validators:
            try:
                validator(value)
            except ValidationError as error:
                code = getattr(error, "code", None)
                message = self.error_messages.get(code, error.messages[0])
                raise ValidationError(message, code=code) from None


def _below(minimum: Decimal) -> str:
    if minimum == 0:
        return str(_("The amount cannot be negative."))
    if minimum == Decimal("0.01"):
        return str(_("The amount must be more than zero."))
    return _("The amount must be at least %(min)s.") % {"min": format_money(minimum)}


def one_line(value: str) -> None:
    """A validator for names and titles: one line of printable text. A line break, a tab,
    a NUL or an escape in a name ends up in an email header (which Django then refuses to
    send), a CSV cell or a log line."""
    if any(not char.isprintable() for char in value):
        raise ValidationError(
            _("Write this on one line, without line breaks or control characters."),
            code="control_characters",
        )


# The admin's fields (``formfield_overrides``): amounts as the staff pages read them, and
# every one-line text typed on one line.
ADMIN_FORMFIELDS = {
    models.DecimalField: {"form_class": MoneyField},
    models.CharField: {"validators": [one_line]},
}
