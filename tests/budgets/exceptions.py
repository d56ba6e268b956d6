"""What budget approval refuses on purpose. Nothing was written in any of these cases.

Each class says which kind of answer it is and carries facts; ``answers`` renders its
sentences when a page, the admin or the command asks (``hoa.answers.refusals``). Every
refusal of the lease carries the attempt's subject: ``organization`` and ``year``.
"""

from decimal import Decimal

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
from hoa.models import Organization
from locking import Outcome


class BudgetsError(Refusal):
    """Base class of everything budget approval refuses on purpose."""


class InvalidYear(BudgetsError, ValueError):
    """``value`` is not a year of four digits (``0001`` to ``9999``)."""

    answer = Answer.BAD_REQUEST
    title = gettext_lazy("Not a year")

    def __init__(self, value: object):
        super().__init__(value=value)


class NoBudget(BudgetsError):
    """``organization`` has no budget for ``year`` to approve; nothing locked."""

    answer = Answer.BAD_REQUEST
    title = gettext_lazy("No budget")

    def __init__(self, *, organization: Organization, year: int):
        super().__init__(organization=organization, year=year)


class NotAllowed(BudgetsError, NotPermitted):
    """The actor may not approve this organization's budgets."""


class ApprovalBusy(BudgetsError, Busy):
    """Another holder is approving this budget right now."""

    title = gettext_lazy("The budget is being approved")


class ApprovalSuperseded(BudgetsError, Superseded):
    """A newer holder took over while this attempt was paused past its lease."""

    title = gettext_lazy("A newer approval took over")


class ApprovalLeaseLost(BudgetsError, LeaseRanOut):
    """The lease was lost (or could not be confirmed) before the board was notified."""

    title = gettext_lazy("Stopped before notifying the board")


class LockServiceUnavailable(BudgetsError, LockServiceDown):
    """Redis could not be reached: no lease, nothing approved."""


class NotificationFailed(BudgetsError, CallFailed):
    """The board notification endpoint refused the approval, failed or timed out."""

    title = gettext_lazy("The board could not be notified")


class AmountChanged(BudgetsError):
    """The draft's amount changed (now ``amount``) after the board was notified of
    ``notified``: the approval is refused at commit, and the runner records that the board
    was told in vain. Approving again notifies the board of the new amount."""

    answer = Answer.RETRY
    outcome = Outcome.CONFLICT
    title = gettext_lazy("The budget changed meanwhile")

    def __init__(self, *, organization: Organization, year: int, notified: Decimal, amount):
        super().__init__(organization=organization, year=year, notified=notified, amount=amount)
