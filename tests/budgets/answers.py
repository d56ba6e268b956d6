"""What budget approval refuses by its own rules, and how its answers read: its refusals,
its words in the refusals every operation shares (``WORDS``) and its result."""

from decimal import Decimal

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.answers.refusals import Refusal, sentence
from hoa.answers.sentences import Words
from hoa.answers.table import Answer, Audience
from hoa.fenced import Result
from hoa.models import Organization
from hoa.security.audit import shown
from hoa.web.money import format_money
from locking import Outcome

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
            return _(
                "The %(year)s budget of %(organization)s changed to %(amount)s while it was "
                "being approved at %(notified)s; nothing was approved. Approve it again."
            ) % _facts(refusal, amount=refusal.amount, notified=refusal.notified)
    raise TypeError(f"no sentence for {type(refusal).__name__}")


def _facts(about, **amounts) -> dict:
    """A refusal's or a budget's association and year, and ``amounts`` as money."""
    money = {name: format_money(amount) for name, amount in amounts.items()}
    return {"organization": about.organization.name, "year": about.year, **money}


# Its words in the refusals every operation shares, which the frame says.
WORDS = Words(
    doing=lambda refusal: _("approving the %(year)s budget of %(organization)s") % _facts(refusal),
    may=gettext_lazy("approve the budgets of %(organization)s"),
    party=BOARD,
)


def result_message(result: Result, audience: Audience = Audience.STAFF) -> str:
    """What a successful call did; operators read the same sentence."""
    facts = _facts(result.row, amount=result.row.amount)
    if result.committed:
        return _("Approved the %(year)s budget of %(organization)s (%(amount)s).") % facts
    return _("The %(year)s budget of %(organization)s was already approved (%(amount)s).") % facts
