"""What charge generation refuses on purpose. Nothing was written in any of these cases.

Each class says which kind of answer it is and carries facts; ``charges.answers`` renders
its sentences when a page, the admin or the command asks (``hoa.answers.refusals``). The
lock refusals carry the attempt's subject: ``organization`` and ``month``.
"""

from django.utils.translation import gettext_lazy

from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LeaseRanOut,
    LockServiceDown,
    NotPermitted,
    Refusal,
    Superseded,
)
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


class NotAllowed(ChargesError, NotPermitted):
    """The actor may not generate this organization's charges."""


class GenerationBusy(ChargesError, Busy):
    """Another holder is generating these charges right now."""

    title = gettext_lazy("Charges are being generated")


class GenerationSuperseded(ChargesError, Superseded):
    """A newer holder took over while this attempt was paused past its lease."""

    title = gettext_lazy("A newer holder took over")


class GenerationLeaseLost(ChargesError, LeaseRanOut):
    """The lease was lost (or could not be confirmed) before the billing call."""

    title = gettext_lazy("Stopped before billing")


class LockServiceUnavailable(ChargesError, LockServiceDown):
    """Redis could not be reached: no lease, nothing generated."""


class BillingFailed(ChargesError, CallFailed):
    """The billing system refused the run, failed or timed out."""

    title = gettext_lazy("The billing system failed")


class UnitsChanged(ChargesError):
    """A unit the attempt billed was removed before its charges were written (its
    ``MonthlyCharge`` would name a unit that is gone); nothing was written. Trying again
    bills the units there are now."""

    answer = Answer.RETRY
    outcome = Outcome.CONFLICT
    title = gettext_lazy("The units changed meanwhile")

    def __init__(self, *, organization, month):
        super().__init__(organization=organization, month=month)
