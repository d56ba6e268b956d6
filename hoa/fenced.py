"""What every fenced operation does the same way around ``locking.run_fenced``.

An operation (an app's ``services``) declares what it is once, in its ``resources``::

    HANDOVER = FencedOperation(
        "key-handover", "keys.hand_over", "KEYS_LOCK_TTL_SECONDS", NotAllowed, LOCK_REFUSALS
    )

and then, for each call, ``begin`` checks the actor (staff of the organization with the
permission, or ``None``: the operator at the shell; a refusal is recorded in the one
refusal audit, ``AccessDenial``, before it is raised) and ``run`` runs the work under a
fresh lease with ``run_fenced``, recorded as the actor's attempt in the organization's
scope, raising locking's refusals as the operation's own (``Busy``, ``Superseded``,
``LockServiceDown`` subclasses whose sentences come from the app's ``answers``)::

    attempt = HANDOVER.begin(actor, via=via, organization=org, resource=resource, ip=ip)
    return attempt.run(work, unit=unit)  # work(lease); unit: a fact its sentences name
"""

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils.translation import gettext_lazy as _

from hoa.integrations.webhooks import ExternalCallFailed
from hoa.models import Organization
from hoa.scopes import scope_for_organization
from hoa.security.audit import Reason, record_denial
from hoa.web.answer_table import Answer, Audience, Refusal
from locking import (
    Attempt,
    Lease,
    LeaseLost,
    LockHeld,
    LockUnavailable,
    Outcome,
    StaleFencingToken,
    prepare_fences,
    run_fenced,
)

T = TypeVar("T")


def actor_label(actor, via: str = "") -> str:
    """Who asked, as the audit trail records it: ``alice``, ``alice via cli:ops``,
    ``cli:ops`` (the operator at the shell, no user) or ``system``."""
    name = actor.get_username() if actor is not None else ""
    return " via ".join(part for part in (name, via) if part) or "system"


def person_holding(holder: str) -> str | None:
    """The user a lease's holder label names, for staff to read: ``alice`` of ``alice on
    web-1 pid 42`` or of ``alice via cli:ops on cron-1 pid 7``; ``None`` when it names no
    user (a cron job, the operator at the shell, an unlabelled process)."""
    who = holder.partition(" on ")[0].partition(" via ")[0].strip()
    if not who or " " in who or ":" in who:
        return None
    users = get_user_model()._default_manager
    return who if users.filter(**{get_user_model().USERNAME_FIELD: who}).exists() else None


# -- the refusals every operation has, in its own words -----------------------------------


class _FactRefusal(Refusal):
    """Base of these refusals: its ``facts`` (the operation's, e.g. ``organization``, ``month``)
    become attributes and go to ``sentence``, the app's ``answers`` function; called once
    per ``Audience`` when operators are told more than staff (``tells_operators_more``)."""

    sentence: Callable[..., str]
    sentence_name: str  # the name of that function in the app's answers module
    tells_operators_more = False  # whether ``sentence`` takes ``audience=``

    def __init__(self, facts: dict, **details):
        vars(self).update(facts)
        sentence = type(self).sentence
        if not self.tells_operators_more:
            super().__init__(sentence(**facts, **details))
            return
        super().__init__(
            sentence(**facts, **details, audience=Audience.STAFF),
            detail=sentence(**facts, **details, audience=Audience.OPERATORS),
        )


class Busy(_FactRefusal):
    """Another holder has the lease right now.

    The app's ``busy(**facts, holder, person, retry_after, audience)``: staff read who
    (``person``, a user's name, or another worker) and that it is short; operators read the
    holder's label (host and pid) and the seconds its lease has left.
    """

    answer = Answer.RETRY
    outcome = Outcome.BUSY
    sentence_name = "busy"
    tells_operators_more = True

    def __init__(self, *, lock: LockHeld, **facts):
        self.busy = lock  # the lease: the operators' facts (holder label, since, until)
        self.holder = lock.holder or str(_("another worker"))
        self.person = person_holding(lock.holder or "")  # all staff are shown of it
        super().__init__(
            facts, holder=self.holder, person=self.person, retry_after=lock.retry_after
        )


class Superseded(_FactRefusal):
    """This attempt's lease ran out and a newer holder took over."""

    answer = Answer.RETRY
    outcome = Outcome.STALE
    sentence_name = "superseded"
    tells_operators_more = True

    def __init__(self, *, stale: StaleFencingToken, **facts):
        self.token, self.recorded = stale.token, stale.recorded
        super().__init__(facts, token=stale.token, recorded=stale.recorded)


class LeaseRanOut(_FactRefusal):
    """The lease was lost before the external call (``lease.check()``): stopped early."""

    answer = Answer.RETRY
    outcome = Outcome.LOST
    sentence_name = "lease_lost"

    def __init__(self, *, lost: LeaseLost, **facts):
        self.token, self.reason = lost.token, lost.reason
        super().__init__(facts)


class LockServiceDown(_FactRefusal):
    """The lock service (Redis) could not be reached."""

    answer = Answer.UNAVAILABLE
    outcome = Outcome.UNAVAILABLE
    sentence_name = "lock_service_down"
    title = _("Lock service unavailable")

    def __init__(self, *, reason: str, **facts):
        self.reason = reason
        super().__init__(facts, reason=reason)


def lock_refusals(
    base: type[Refusal], answers, *, prefix: str
) -> tuple[type[Busy], type[Superseded], type[LeaseRanOut], type[LockServiceDown]]:
    """An operation's ``<prefix>Busy``, ``<prefix>Superseded``, ``<prefix>LeaseLost`` and
    ``LockServiceUnavailable``: subclasses of its ``base`` error (so its callers' one
    ``except`` catches them) that speak through its ``answers`` module: ``busy()``,
    ``superseded()``, ``lease_lost()`` and ``lock_service_down()``, headed by
    ``BUSY_TITLE``, ``SUPERSEDED_TITLE`` and ``LEASE_LOST_TITLE``."""
    kinds = (
        (Busy, f"{prefix}Busy", answers.BUSY_TITLE),
        (Superseded, f"{prefix}Superseded", answers.SUPERSEDED_TITLE),
        (LeaseRanOut, f"{prefix}LeaseLost", answers.LEASE_LOST_TITLE),
        (LockServiceDown, "LockServiceUnavailable", LockServiceDown.title),
    )
    return tuple(
        type(
            name,
            (kind, base),
            {
                "__module__": base.__module__,
                "__qualname__": name,
                "__doc__": kind.__doc__,
                "title": title,
                "sentence": staticmethod(getattr(answers, kind.sentence_name)),
            },
        )
        for kind, name, title in kinds
    )


class NotPermitted(_FactRefusal):
    """The actor is not staff of the organization or lacks the operation's permission.

    Raised before any lease (``FencedOperation.begin``): recorded as an ``AccessDenial``.
    """

    answer = Answer.FORBIDDEN
    outcome = Outcome.DENIED
    title = _("Not allowed")

    def __init__(self, *, actor: str, organization: Organization):
        super().__init__({"actor": actor, "organization": organization})


class CallFailed(_FactRefusal):
    """The operation's external call (billing, dispatch) refused, failed or timed out."""

    answer = Answer.UPSTREAM_FAILED
    outcome = Outcome.FAILED

    def __init__(self, *, call: ExternalCallFailed, **facts):
        self.reason, self.status = call.reason, call.status
        super().__init__(facts, reason=call.reason)


@dataclass(frozen=True)
class FencedOperation:
    """What an operation is, for the steps every operation takes the same way."""

    name: str  # the audit's operation name, e.g. "key-handover"
    permission: str  # what a user needs, e.g. "keys.hand_over"
    ttl_setting: str  # the setting that holds its lease's lifetime in seconds
    not_allowed: type[NotPermitted]  # its refusal of a user
    refusals: tuple[type[Busy], type[Superseded], type[LeaseRanOut], type[LockServiceDown]]

    def begin(
        self, actor, *, via: str = "", organization: Organization, resource: str, ip=None
    ) -> "Call":
        """Check ``actor`` (a user, or ``None`` for the operator at the shell; ``via`` says
        where the request came from) and return the call to ``run``."""
        label = actor_label(actor, via)
        if actor is not None and not (
            organization.has_staff(actor) and actor.has_perm(self.permission)
        ):
            record_denial(
                reason=Reason.PERMISSION,
                note=f"not staff of {organization.slug} with {self.permission}",
                resource=resource,
                actor=label,
                ip=ip,
                organization=organization,
                operation=self.name,
            )
            raise self.not_allowed(actor=actor.get_username(), organization=organization)
        return Call(self, resource=resource, organization=organization, label=label, ip=ip)

    def prepare(self, resources: Iterable[str]) -> None:
        """Before a batch: record the first fence epoch of its new resources at once
        (``prepare_fences``), so each first grant skips a commit of its own. Redis down
        is left for the grants to answer, one by one, in the batch's own words."""
        with contextlib.suppress(LockUnavailable):
            prepare_fences(resources)


@dataclass(frozen=True)
class Call:
    """One permitted call of an operation, before its lease."""

    operation: FencedOperation
    resource: str
    organization: Organization
    label: str  # who asked, as the audit records it
    ip: str | None = None

    def run(self, work: Callable[[Lease], T], **facts) -> T:
        """``work(lease)`` under a fresh lease on the resource (``run_fenced``); locking's
        refusals are raised as the operation's, with ``facts`` for their sentences."""
        busy, superseded, ran_out, down = self.operation.refusals
        attempt = Attempt(
            actor=self.label,
            operation=self.operation.name,
            scope=scope_for_organization(self.organization),
            ip=self.ip,
        )
        ttl = timedelta(seconds=float(getattr(settings, self.operation.ttl_setting)))
        try:
            return run_fenced(self.resource, work, ttl=ttl, attempt=attempt)
        except LockHeld as exc:
            raise busy(lock=exc, **facts) from exc
        except StaleFencingToken as exc:
            raise superseded(stale=exc, **facts) from exc
        except LeaseLost as exc:
            raise ran_out(lost=exc, **facts) from exc
        except LockUnavailable as exc:
            raise down(reason=exc.reason, **facts) from exc
