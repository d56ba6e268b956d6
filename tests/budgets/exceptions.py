"""What budget approval refuses by its own rules. Nothing was written in any of these cases.

Each class says which kind of answer it is and carries facts; ``answers`` renders its
sentences when a page, the admin or the command asks (``hoa.answers.refusals``), and those
of the refusals every operation shares (the frame's classes, carrying the attempt's
subject: ``organization`` and ``year``).
"""

from decimal import Decimal

from django.utils.translation import gettext_lazy

from hoa.answers.refusals import Refusal
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


class AmountChanged(BudgetsError):
    """The draft's amount changed (now ``amount``) after the board was notified of
    ``notified``: the approval is refused at commit, and the runner records that the board
    was told in vain. Approving again notifies the board of the new amount."""

    answer = Answer.RETRY
    outcome = Outcome.CONFLICT
    title = gettext_lazy("The budget changed meanwhile")

    def __init__(self, *, organization: Organization, year: int, notified: Decimal, amount):
        super().__init__(organization=organization, year=year, notified=notified, amount=amount)
