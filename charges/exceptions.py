"""What charge generation raises on purpose. Nothing was written in any of these cases.

Each says which kind of answer it is (``hoa.answers.table``) and, when it answers a fenced
attempt, the ``outcome`` ``run_fenced`` records. ``str(exc)`` is the sentence a person
reads (``charges.answers``).
"""

from django.utils.translation import gettext_lazy as _

from charges import answers
from hoa.answers.table import Answer, Refusal
from hoa.fenced import CallFailed, NotPermitted, lock_refusals


class ChargesError(Refusal):
    """Base class of everything charge generation raises on purpose."""


class InvalidMonth(ChargesError, ValueError):
    """The month is not a ``YYYY-MM`` month (or not the first day of one), or is outside
    the months that can be billed (``window``: the first and the last)."""

    answer = Answer.BAD_REQUEST
    title = _("Not a month")

    def __init__(self, value: object, why: str = "format", *, window=None):
        self.value = value
        if window is not None:  # a month, but outside the months that can be billed
            super().__init__(answers.outside_window(value, *window))
        else:
            super().__init__(answers.not_a_month(value, why))


class NotAllowed(NotPermitted, ChargesError):
    sentence = staticmethod(answers.not_allowed)


class BillingFailed(CallFailed, ChargesError):
    title = _("The billing system failed")
    sentence = staticmethod(answers.billing_failed)


# Locking's four refusals in this app's words; FencedOperation raises them.
LOCK_REFUSALS = lock_refusals(ChargesError, answers, prefix="Generation")
(
    GenerationBusy,
    GenerationSuperseded,
    GenerationLeaseLost,
    LockServiceUnavailable,
) = LOCK_REFUSALS
