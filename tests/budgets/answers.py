"""What budget approval refuses by its own rules (nothing written in any), and how each of
its answers reads to a person: its refusals' sentences, its words in the refusals every
operation shares (``WORDS``: the frame says those), its result's sentence.
"""

from decimal import Decimal
from typing import TYPE_CHECKING

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.answers.refusals import Refusal, sentence
from hoa.answers.sentences import Words
from hoa.answers.table import Answer, Audience
from hoa.models import Organization
from hoa.security.audit import shown
from hoa.web.money import format_money
from locking import Outcome

if TYPE_CHECKING:
    from hoa.fenced import Result

# Whom an approval tells, as an audit line and its refusals name it.
BOARD = gettext_lazy("the board")


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


@sentence.register(BudgetsError)
def refusal_sentence(refusal: Refusal, audience: Audience) -> str:
    """What ``audience`` reads for a refusal of budget approval."""
    match refusal:
        case InvalidYear():
            return _('"%(value)s" is not a year: use four digits, e.g. 2027.') % {
                "value": shown(refusal.value)
            }
        case NoBudget():
            return _("%(organization)s has no budget for %(year)s to approve.") % _facts(refusal)
        case AmountChanged():
            return amount_changed(refusal)
    raise TypeError(f"no sentence for {type(refusal).__name__}")


def _facts(refusal: Refusal) -> dict:
    return {"organization": refusal.organization.name, "year": refusal.year}


# Its words in the refusals every operation shares, which the frame says.
WORDS = Words(
    doing=lambda refusal: _("approving the %(year)s budget of %(organization)s") % _facts(refusal),
    may=gettext_lazy("approve the budgets of %(organization)s"),
    party=BOARD,
)


def amount_changed(refusal: AmountChanged) -> str:
    return _(
        "The %(year)s budget of %(organization)s changed to %(amount)s while it was being "
        "approved at %(notified)s; nothing was approved. Approve it again."
    ) % {
        **_facts(refusal),
        "amount": format_money(refusal.amount),
        "notified": format_money(refusal.notified),
    }


def result_message(result: "Result", audience: Audience = Audience.STAFF) -> str:
    """What a successful call did; operators read the same sentence."""
    budget = result.row
    facts = {
        "organization": budget.organization.name,
        "year": budget.year,
        "amount": format_money(budget.amount),
    }
    if result.committed:
        return _("Approved the %(year)s budget of %(organization)s (%(amount)s).") % facts
    return _("The %(year)s budget of %(organization)s was already approved (%(amount)s).") % facts
