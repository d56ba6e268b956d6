"""How each answer of budget approval reads to a person: one place for the staff page, the
admin action and the command. Translated, with named placeholders.

``sentence`` renders every refusal of budget approval (``exceptions``) from its facts, when
an edge asks. ``busy`` and ``superseded`` speak to two audiences
(``hoa.answers.table.Audience``): staff without tokens, hosts or lease lifetimes; operators
with them.
"""

import math
from typing import TYPE_CHECKING

from django.utils.translation import gettext as _

from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LeaseRanOut,
    LockServiceDown,
    NotPermitted,
    Refusal,
    Superseded,
    person_holding,
    sentence,
)
from hoa.answers.table import Audience
from hoa.security.audit import shown
from hoa.web.money import format_money
from tests.budgets.exceptions import AmountChanged, BudgetsError, InvalidYear, NoBudget

if TYPE_CHECKING:
    from hoa.fenced import Result


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
        case NotPermitted():
            return _("%(actor)s may not approve the budgets of %(organization)s.") % {
                "actor": refusal.actor,
                "organization": refusal.organization.name,
            }
        case Busy():
            return busy(refusal, audience)
        case Superseded():
            return superseded(refusal, audience)
        case LeaseRanOut():
            return _(
                "Approving the %(year)s budget of %(organization)s took too long and was "
                "stopped before the board was notified; nothing was sent or written. Try again."
            ) % _facts(refusal)
        case LockServiceDown():
            return _(
                "The lock service (Redis) is unavailable, so the %(year)s budget of "
                "%(organization)s was not approved: %(reason)s"
            ) % {**_facts(refusal), "reason": refusal.reason}
        case CallFailed():
            return _(
                "The board could not be notified of the %(year)s budget of %(organization)s "
                "(%(reason)s); nothing was approved."
            ) % {**_facts(refusal), "reason": refusal.reason}
        case AmountChanged():
            return amount_changed(refusal)
    raise TypeError(f"no sentence for {type(refusal).__name__}")


def _facts(refusal: Refusal) -> dict:
    return {"organization": refusal.organization.name, "year": refusal.year}


def busy(refusal: Busy, audience: Audience) -> str:
    facts = _facts(refusal)
    if audience is Audience.OPERATORS:
        return _(
            "The %(year)s budget of %(organization)s is being approved by %(holder)s; "
            "try again in %(seconds)d seconds."
        ) % {
            **facts,
            "holder": refusal.holder or _("another worker"),
            "seconds": max(1, math.ceil(refusal.retry_after.total_seconds())),
        }
    if person := person_holding(refusal.holder):
        return _(
            "Another staff member (%(person)s) is approving the %(year)s budget of "
            "%(organization)s; this usually takes a few seconds."
        ) % {**facts, "person": person}
    return (
        _(
            "Another worker is approving the %(year)s budget of %(organization)s; this "
            "usually takes a few seconds."
        )
        % facts
    )


def superseded(refusal: Superseded, audience: Audience) -> str:
    facts = _facts(refusal)
    if audience is Audience.OPERATORS:
        return _(
            "A newer holder (%(newer)s) took over the %(year)s budget of "
            "%(organization)s while this attempt (token %(token)s) was paused past its "
            "lease; nothing was written."
        ) % {**facts, "token": refusal.token, "newer": refusal.newer}
    return (
        _(
            "Someone else took over approving the %(year)s budget of %(organization)s while "
            "this attempt was waiting; nothing of this attempt was written."
        )
        % facts
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
