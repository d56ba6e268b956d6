"""Refusals: what a caller asked was not done, and nothing was written.

One hierarchy, rooted at ``Refusal``. The kinds every fenced operation shares are written
here once (``NotPermitted``, ``Busy``, ``Superseded``, ``LeaseRanOut``, ``LockServiceDown``,
``CallFailed``), and raised as they are: ``FencedOperation.begin`` and the runner
(``hoa.fenced``) raise them with the ``operation`` they refused and its subject. An app
writes classes only for the refusals of its own rules (``ContractNotActive``,
``InvalidMonth``), under its own base error. Callers keep one ``except Refusal``.

A refusal carries facts, never sentences: the kind's own (the holder, the tokens, the
reason) and its subject, the facts of the operation it refused (``organization`` and
``month``, ``complaint``), as attributes. Nothing is queried or translated when one is
made. The sentence is rendered when an edge asks for it (``sentence``, a
``functools.singledispatch``): the shared kinds by the frame, once for every operation, in
the words its declaration gives (``hoa.answers.sentences``); an app's own by its
``answers`` module, which registers its base error::

    @sentence.register(ChargesError)
    def refusal_sentence(refusal: Refusal, audience: Audience) -> str:
        match refusal:
            case InvalidMonth(): ...
            case UnitsChanged(): ...

``refusal.message`` is staff's sentence (pages, admin messages), in the zone of the page;
``str(refusal)`` is the operators' (the command's line, the audit's detail), as Django's
``ValidationError`` renders its message when printed, its times in ``TIME_ZONE``.
"""

from datetime import datetime, timedelta
from functools import singledispatch
from typing import TYPE_CHECKING, ClassVar

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.answers.table import Answer, Audience
from locking import LeaseLost, LockHeld, Outcome, StaleFencingToken

if TYPE_CHECKING:
    from hoa.operations import FencedOperation


class Refusal(Exception):
    """Base of every refusal: nothing was written, and here are the facts of why.

    ``answer`` says which kind of answer it is (``hoa.answers.table``); ``outcome`` what the
    audit records when it ends a fenced attempt; ``title`` heads its page. The keyword
    arguments are its subject, kept as attributes.
    """

    answer: ClassVar[Answer]
    outcome: ClassVar[Outcome | None] = None
    title: ClassVar[str] = ""

    # Set by the runner when the refusal came after the outside had been told (the vendor
    # was dispatched, then the commit refused): whom it told, and what taking it back got.
    told_in_vain: object = None
    cancellation: str = ""

    def __init__(self, **subject):
        super().__init__()
        vars(self).update(subject)

    @property
    def message(self) -> str:
        """Staff's sentence: people and what to do, no tokens, hosts or lease lifetimes."""
        return sentence(self, Audience.STAFF)

    def __str__(self) -> str:
        """The operators' sentence, with the technical facts; what commands print and the
        audit records, naming whom the outside call told in vain."""
        # Operators read TIME_ZONE, as on the lock page that shows the audit beside its own
        # times: a refusal met on an association's page is recorded in it, not in its zone.
        with timezone.override(settings.TIME_ZONE):
            said = sentence(self, Audience.OPERATORS)
        if self.told_in_vain is None:
            return said
        told = _("%(party)s was told in vain; %(cancellation)s") % {
            "party": self.told_in_vain,
            "cancellation": self.cancellation,
        }
        return f"{said.rstrip('.')}; {told}"


@singledispatch
def sentence(refusal: Refusal, audience: Audience) -> str:
    """The sentence ``audience`` reads for ``refusal``: each app's ``answers`` registers its
    base error, ``hoa.answers.sentences`` the shared kinds. A refusal nobody speaks for
    still says what it is (a test checks there is none)."""
    return f"{type(refusal).__name__}: nothing was done."


# -- the kinds every fenced operation shares ----------------------------------------------


class OperationRefusal(Refusal):
    """A refusal every fenced operation shares, raised by the frame with the ``operation``
    it refused (its ``FencedOperation``), whose ``answers`` give the words of its sentence
    (``hoa.answers.sentences``)."""

    operation: "FencedOperation"


class NotPermitted(OperationRefusal):
    """The actor is not staff of the organization, or lacks the operation's permission.

    Refused before any lease and recorded as an ``AccessDenial``. Facts: ``actor`` (the
    username), ``organization``.
    """

    answer = Answer.FORBIDDEN
    outcome = Outcome.DENIED
    title = gettext_lazy("Not allowed")


class Busy(OperationRefusal):
    """Another holder has the lease right now.

    Facts: ``resource``; ``holder``, the holder's label (``alice on web-1 pid 42``);
    ``since``, when it was granted (Redis's clock); ``retry_after``, the time its lease has
    left; ``token``, the fence counter then. ``busy`` keeps locking's ``LockHeld`` for the
    page's link to the lease's details.
    """

    answer = Answer.RETRY
    outcome = Outcome.BUSY
    title = gettext_lazy("Being done right now")

    def __init__(
        self,
        *,
        resource: str,
        holder: str,
        since: datetime | None,
        retry_after: timedelta,
        token: int | None,
        busy: LockHeld | None = None,
        **subject,
    ):
        super().__init__(**subject)
        self.resource, self.holder, self.since = resource, holder, since
        self.retry_after, self.token, self.busy = retry_after, token, busy

    @classmethod
    def held(cls, lock: LockHeld, **subject) -> "Busy":
        """The refusal of a grant that found ``lock``'s holder."""
        return cls(
            resource=lock.resource,
            holder=lock.holder,
            since=lock.acquired_at,
            retry_after=lock.retry_after,
            token=lock.token,
            busy=lock,
            **subject,
        )


class Superseded(OperationRefusal):
    """This attempt's lease ran out and a newer holder took over: the fence refused
    ``token`` because ``recorded`` (a newer grant's) was already written."""

    answer = Answer.RETRY
    outcome = Outcome.STALE
    title = gettext_lazy("Someone else took over")

    def __init__(self, *, resource: str, token: int, recorded: int | None, **subject):
        super().__init__(**subject)
        self.resource, self.token, self.recorded = resource, token, recorded

    @property
    def newer(self) -> str:
        """How an operators' sentence names the holder that took over: its token, or, when
        an outside service answered 409 without a token it could vouch for (an unsigned
        answer), that it did not say (never "token None")."""
        if self.recorded is None:
            return _("a token the outside service did not name: its 409 was not signed")
        return _("token %(recorded)s") % {"recorded": self.recorded}

    @classmethod
    def refused(cls, resource: str, stale: StaleFencingToken, **subject) -> "Superseded":
        return cls(resource=resource, token=stale.token, recorded=stale.recorded, **subject)


class LeaseRanOut(OperationRefusal):
    """The lease was lost, or could not be confirmed, before the external call
    (``lease.check()``): the attempt stopped before telling anyone."""

    answer = Answer.RETRY
    outcome = Outcome.LOST
    title = gettext_lazy("Stopped before it was done")

    def __init__(self, *, resource: str, token: int, reason: str, **subject):
        super().__init__(**subject)
        self.resource, self.token, self.reason = resource, token, reason

    @classmethod
    def lost(cls, lost: LeaseLost, **subject) -> "LeaseRanOut":
        return cls(resource=lost.resource, token=lost.token, reason=lost.reason, **subject)


class LockServiceDown(OperationRefusal):
    """The lock service (Redis) could not be reached; ``reason`` says how it failed."""

    answer = Answer.UNAVAILABLE
    outcome = Outcome.UNAVAILABLE
    title = gettext_lazy("Lock service unavailable")

    def __init__(self, *, resource: str, reason: str, **subject):
        super().__init__(**subject)
        self.resource, self.reason = resource, reason


class CallFailed(OperationRefusal):
    """The operation's external call (billing, dispatch, payment) was refused, or could not
    be made: ``reason``, and the HTTP ``status`` when there was one. It did nothing."""

    answer = Answer.UPSTREAM_FAILED
    outcome = Outcome.FAILED
    title = gettext_lazy("An outside service failed")

    def __init__(self, *, reason: str, status: int | None = None, **subject):
        super().__init__(**subject)
        self.reason, self.status = reason, status


class OutcomeUnknown(OperationRefusal):
    """The operation's external call may have been acted on, and its answer does not say
    (``reason``: timed out, the connection lost, redirected, an HTTP 5xx ``status``).

    Not "nothing was saved": the attempt is recorded (``call``, an ``hoa.models.OutsideCall``)
    and settled by the same idempotency key, retried or taken back
    (``settle_outside_calls``). Nothing of the operation's own was written.
    """

    answer = Answer.UNKNOWN
    outcome = Outcome.UNKNOWN
    title = gettext_lazy("Not known yet")

    def __init__(self, *, reason: str, status: int | None = None, **subject):
        super().__init__(**subject)
        self.reason, self.status = reason, status
