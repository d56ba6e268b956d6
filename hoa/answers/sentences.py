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
from django.utils.translation import gettext_lazy

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
    tells ("the locksmith"), declared here only.
    """

    doing: Callable[[Refusal], str]
    may: str
    party: str


# The kinds said with the operation's words and the refusal's own facts alone (its token,
# the newer holder, the reason): (staff's sentence, the operators'). Staff read no token,
# nor the lock service's reason (it names Redis's host).
FAILED = gettext_lazy(
    "%(doing)s failed: %(party)s did not accept it (%(reason)s); nothing was saved."
)
SAID = {
    Superseded: (
        gettext_lazy(
            "Someone else took over %(doing)s while this attempt was waiting; nothing of this "
            "attempt was saved. Try again to see where it stands."
        ),
        gettext_lazy(
            "A newer holder (%(newer)s) took over %(doing)s while this attempt (token "
            "%(token)s) was paused past its lease; nothing of this attempt was written."
        ),
    ),
    LeaseRanOut: (
        gettext_lazy(
            "%(doing)s took too long and was stopped before %(party)s was told; nothing was "
            "sent or saved. Try again."
        ),
        gettext_lazy(
            "%(doing)s took too long and was stopped (token %(token)s: %(reason)s) before "
            "%(party)s was told; nothing was sent or saved. Try again."
        ),
    ),
    LockServiceDown: (
        gettext_lazy(
            "%(doing)s was not done: the lock service is unavailable; nothing was saved. Try "
            "again in a few minutes."
        ),
        gettext_lazy(
            "%(doing)s was not done: the lock service (Redis) is unavailable (%(reason)s); "
            "nothing was saved."
        ),
    ),
    CallFailed: (FAILED, FAILED),
}


@sentence.register
def shared_sentence(refusal: OperationRefusal, audience: Audience) -> str:
    """What ``audience`` reads for a refusal every operation shares, in its words."""
    words: Words = refusal.operation.answers
    operators = audience is Audience.OPERATORS
    match refusal:
        case NotPermitted():
            may = words.may % {"organization": refusal.organization.name}
            return _("%(actor)s may not %(may)s.") % {"actor": refusal.actor, "may": may}
        case Busy():
            return _busy(refusal, words.doing(refusal), operators)
        case OutcomeUnknown():
            return _unknown(refusal, words.party, operators)
    staff, for_operators = SAID[type(refusal)]
    facts = {
        "doing": words.doing(refusal),
        "party": words.party,
        "token": getattr(refusal, "token", None),
        "newer": getattr(refusal, "newer", None),
        "reason": getattr(refusal, "reason", ""),
    }
    return capfirst((for_operators if operators else staff) % facts)


def _busy(refusal: Busy, doing: str, operators: bool) -> str:
    """Staff read the person holding it, or another worker; operators its holder label and
    the seconds its lease has left."""
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
        "doing": doing,
        "holder": refusal.holder or _("unnamed"),
        "person": person,
        "seconds": max(1, math.ceil(refusal.retry_after.total_seconds())),
    }


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
