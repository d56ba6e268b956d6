"""How each answer of budget approval reads to a person: one place for the staff page, the
admin action and the command. Translated, with named placeholders.

``refusal_sentence`` renders the refusals of budget approval's own rules (``exceptions``)
from their facts, when an edge asks. The kinds every operation shares the frame says
(``hoa.answers.sentences``), in the words of ``WORDS``: what it was doing, what its
permission allows, whom its call tells.
"""

from typing import TYPE_CHECKING

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.answers.refusals import Refusal, sentence
from hoa.answers.sentences import Words
from hoa.answers.table import Audience
from hoa.security.audit import shown
from hoa.web.money import format_money
from tests.budgets.exceptions import AmountChanged, BudgetsError, InvalidYear, NoBudget

if TYPE_CHECKING:
    from hoa.fenced import Result

# Whom an approval tells, as an audit line and its refusals name it.
BOARD = gettext_lazy("the board")


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
