"""The sentences of the refusals every fenced operation shares, said once for all of them.

``Busy``, ``Superseded``, ``LeaseRanOut``, ``LockServiceDown``, ``CallFailed``,
``OutcomeUnknown`` and ``NotPermitted`` (``hoa.answers.refusals``) read the same for every
operation but for three facts its declaration gives once (``FencedOperation.answers``, a
``Words``): what it was doing, said as people say it ("handing out the keys of unit 4B of
Maple Court", from the refusal's subject), what its permission lets staff do, and
whom its outside call tells. An app's ``answers`` module then says only its own refusals
(``@sentence.register`` for its base error) and its results.

Each sentence speaks to two audiences (``hoa.answers.table.Audience``): staff read people
and what to do, never a fencing token, a host, a pid or a lease lifetime; operators read
them.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LeaseRanOut,
    LockServiceDown,
    NotPermitted,
    OperationRefusal,
    OutcomeUnknown,
    Refusal,
    Superseded,
    sentence,
)
from hoa.answers.table import Audience


@dataclass(frozen=True)
class Words:
    """What an operation declares once for the frame to say its shared refusals.

    ``doing(refusal)``: what it was doing, from the refusal's subject, a phrase that
    follows "is" ("handing out the keys of unit 4B of Maple Court"). ``may``: what its
    permission lets staff do at ``%(organization)s`` ("hand out the keys of
    %(organization)s"), translated (``gettext_lazy``). ``party``: whom its outside call
    tells, as its steps' ``party`` ("the locksmith").
    """

    doing: Callable[[Refusal], str]
    may: str
    party: str


@sentence.register
def shared_sentence(refusal: OperationRefusal, audience: Audience) -> str:
    """What ``audience`` reads for a refusal every operation shares, in its words."""
    words: Words = refusal.operation.answers
    if isinstance(refusal, NotPermitted):
        may = words.may % {"organization": refusal.organization.name}
        return _("%(actor)s may not %(may)s.") % {"actor": refusal.actor, "may": may}
    facts = {"doing": words.doing(refusal), "party": words.party}
    operators = audience is Audience.OPERATORS
    match refusal:
        case Busy():
            return _busy(refusal, facts, operators)
        case Superseded():
            return _superseded(refusal, facts, operators)
        case LeaseRanOut():
            return _lease_ran_out(refusal, facts, operators)
        case LockServiceDown():
            return _lock_service_down(refusal, facts, operators)
        case CallFailed():
            return capfirst(
                _("%(doing)s failed: %(party)s did not accept it (%(reason)s); nothing was saved.")
                % {**facts, "reason": refusal.reason}
            )
        case OutcomeUnknown():
            return _unknown(refusal, refusal.party or words.party, operators)
    raise TypeError(f"no sentence for {type(refusal).__name__}")


def _busy(refusal: Busy, facts: dict, operators: bool) -> str:
    person = None if operators else person_holding(refusal.holder)
    if operators:
        said = _("Another holder (%(holder)s) is %(doing)s; try again in %(seconds)d seconds.")
    elif person:
        said = _(
            "Another staff member (%(person)s) is %(doing)s; this usually takes a few seconds."
        )
    else:
        said = _("Another worker is %(doing)s; this usually takes a few seconds.")
    return said % {
        **facts,
        "holder": refusal.holder or _("unnamed"),
        "person": person,
        "seconds": max(1, math.ceil(refusal.retry_after.total_seconds())),
    }


def _superseded(refusal: Superseded, facts: dict, operators: bool) -> str:
    if operators:
        said = _(
            "A newer holder (%(newer)s) took over %(doing)s while this attempt (token "
            "%(token)s) was paused past its lease; nothing of this attempt was written."
        )
    else:
        said = _(
            "Someone else took over %(doing)s while this attempt was waiting; nothing of this "
            "attempt was saved. Try again to see where it stands."
        )
    return said % {**facts, "newer": refusal.newer, "token": refusal.token}


def _lease_ran_out(refusal: LeaseRanOut, facts: dict, operators: bool) -> str:
    if operators:
        said = _(
            "%(doing)s took too long and was stopped (token %(token)s: %(reason)s) before "
            "%(party)s was told; nothing was sent or saved. Try again."
        )
    else:
        said = _(
            "%(doing)s took too long and was stopped before %(party)s was told; nothing was "
            "sent or saved. Try again."
        )
    return capfirst(said % {**facts, "token": refusal.token, "reason": refusal.reason})


def _lock_service_down(refusal: LockServiceDown, facts: dict, operators: bool) -> str:
    """Staff read that it is down; operators also why (its reason names Redis's host)."""
    if operators:
        said = _(
            "%(doing)s was not done: the lock service (Redis) is unavailable (%(reason)s); "
            "nothing was saved."
        )
    else:
        said = _(
            "%(doing)s was not done: the lock service is unavailable; nothing was saved. Try "
            "again in a few minutes."
        )
    return capfirst(said % {**facts, "reason": refusal.reason})


def _unknown(refusal: OutcomeUnknown, party: str, operators: bool) -> str:
    """Who was asked, and that it will be settled: never "nothing was saved"."""
    if operators:
        said = _(
            "%(party)s did not say whether it acted (%(reason)s): not known yet. The attempt is "
            "recorded and will be settled by the same idempotency key (settle_outside_calls, "
            "or run this again)."
        )
    else:
        said = _(
            "%(party)s did not say whether it acted (%(reason)s), so it is not known yet "
            "whether this was done. It is recorded and will be settled automatically: there is "
            "no need to do it again or to choose something else meanwhile."
        )
    return said % {"party": capfirst(party or _("the outside service")), "reason": refusal.reason}


def person_holding(holder: str) -> str | None:
    """The user a lease's holder label names, for staff to read: ``alice`` of ``alice on
    web-1 pid 42`` or of ``alice via cli:ops on cron-1 pid 7``; ``None`` when it names no
    user (a cron job, the operator at the shell, an unlabelled process). Asked when a
    ``Busy`` is said to staff (one query), never when the refusal is made."""
    who = (holder or "").partition(" on ")[0].partition(" via ")[0].strip()
    if not who or " " in who or ":" in who:
        return None
    users = get_user_model()._default_manager
    return who if users.filter(**{get_user_model().USERNAME_FIELD: who}).exists() else None
