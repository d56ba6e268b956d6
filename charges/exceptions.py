"""What charge generation refuses by its own rules; nothing was written.

The refusals every fenced operation shares (busy, superseded, not permitted…) are the
frame's (``hoa.answers.refusals``), carrying the attempt's subject: ``organization`` and
``month``. ``charges.answers`` renders both when a page, the admin or the command asks.
"""

from django.utils.translation import gettext_lazy

from hoa.answers.refusals import Refusal
from hoa.answers.table import Answer
from locking import Outcome


class ChargesError(Refusal):
    """Base class of everything charge generation refuses on purpose."""


class InvalidMonth(ChargesError, ValueError):
    """``value`` is not a ``YYYY-MM`` month (``why``: its ``format``, its ``month`` or
    ``year`` number, or a ``day`` that is not the first), or is a month outside the ones
    that can be billed (``window``: the first and the last)."""

    answer = Answer.BAD_REQUEST

    def __init__(self, value: object, why: str = "format", *, window=None):
        super().__init__()
        self.value, self.why, self.window = value, why, window

    @property
    def title(self):
        if self.window is not None:
            return gettext_lazy("Outside the billing window")
        return gettext_lazy("Not a month")


class UnitsChanged(ChargesError):
    """A unit the attempt billed was removed before its charges were written (its
    ``MonthlyCharge`` would name a unit that is gone); nothing was written. Trying again
    bills the units there are now."""

    answer = Answer.RETRY
    outcome = Outcome.CONFLICT
    title = gettext_lazy("The units changed meanwhile")

    def __init__(self, *, organization, month):
        super().__init__(organization=organization, month=month)
