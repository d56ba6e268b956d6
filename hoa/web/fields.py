"""Form fields every staff form shares."""

import re

from django import forms

_ASCII_ID = re.compile(r"[0-9]{1,19}")


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
