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
