"""The operators' view and hand: who holds which lease, and breaking a stuck one.

``holders`` and ``holder_of`` read the current holders (SCAN and one pipeline per lease);
``break_lease`` deletes the lease the operator was shown, only if it is still that one
(``HolderChanged``), and records who and why: as safe as the lease expiring, since the next
grant's larger token fences the broken holder out. ``BreakLeaseForm`` is every break page's.
What a viewer may see is the project's to say (``LOCK_SCOPES_CALLABLE``). 'Operating it'.
"""

import ipaddress
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.http import HttpRequest
from django.utils.module_loading import import_string
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from redis.exceptions import RedisError

from locking import tracing
from locking.audit import record_fence_event
from locking.conf import setting
from locking.exceptions import LockError, LockUnavailable
from locking.keys import (
    fence_key,
    lock_key,
    parse_lock_value,
    resource_from_lock_key,
    validate_resource,
)
from locking.lock import FenceLock
from locking.outcomes import HolderState, Outcome

# What a viewer may see (locking/scopes.py), documented here with the operators' tools.
from locking.scopes import ViewerScopes, recorded_scopes, viewer_scopes  # noqa: F401
from locking.scripts import text

__all__ = [
    "BreakLeaseForm",
    "HolderChanged",
    "HolderInfo",
    "HolderState",
    "ViewerScopes",
    "break_lease",
    "holder_of",
    "holders",
]

logger = logging.getLogger(__name__)

# The audit's operation name of a broken lease.
BREAK_OPERATION = "break-lease"


@dataclass(frozen=True)
class HolderInfo:
    """What an operator sees of a held lease."""

    resource: str
    owner: str
    label: str
    acquired_at: datetime | None
    ttl_left: timedelta  # 0 for a lease that never expires (``state``)
    token: int | None
    state: HolderState = HolderState.HELD

    @property
    def expires_at(self) -> datetime:
        return datetime.now(tz=UTC) + self.ttl_left

    @property
    def expires_in(self) -> str:
        """The time left as people read it: ``59 s``, ``4 min 3 s``, ``never``."""
        if self.state == HolderState.NO_EXPIRY:
            return gettext("never")
        return duration_text(self.ttl_left)

    @property
    def held_for(self) -> str:
        """How long the lease has been held (``12 min 5 s``; renewals included), or ``""``."""
        if self.acquired_at is None:
            return ""
        return duration_text(datetime.now(tz=UTC) - self.acquired_at)


def duration_text(span: timedelta) -> str:
    """``span`` in whole seconds as people read them: ``59 s``, ``4 min 3 s``, ``2 h 5 min``,
    ``3 d 4 h``; ``under 1 s`` for what is left of the last second. Never ``0:00:59.987000``."""
    seconds = int(span.total_seconds())  # rounded down: "59 s" while 59.987 s are left
    if seconds < 1:
        return gettext("under 1 s") if span > timedelta(0) else gettext("0 s")
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return gettext("%(days)d d %(hours)d h") % {"days": days, "hours": hours}
    if hours:
        return gettext("%(hours)d h %(minutes)d min") % {"hours": hours, "minutes": minutes}
    if minutes:
        return gettext("%(minutes)d min %(seconds)d s") % {"minutes": minutes, "seconds": seconds}
    return gettext("%(seconds)d s") % {"seconds": seconds}


def holder_of(resource: str, *, lock: FenceLock | None = None) -> HolderInfo | None:
    """Return who holds ``resource`` now, or None."""
    validate_resource(resource)
    lock = lock or FenceLock()
    try:
        return _holder_info(lock, resource)
    except RedisError as exc:
        raise LockUnavailable(resource, str(exc)) from exc


def holders(
    *, prefix: str = "", limit: int = 200, lock: FenceLock | None = None
) -> list[HolderInfo]:
    """Return up to ``limit`` current holders, found with SCAN (never KEYS)."""
    lock = lock or FenceLock()
    # Escape the glob characters SCAN's MATCH knows, so a prefix matches literally.
    literal = "".join("\\" + ch if ch in "*?[]\\" else ch for ch in prefix)
    pattern = "lock:{" + literal + "*}"
    found = []
    try:
        for key in lock.client.scan_iter(match=pattern, count=500):
            found.append(text(key))
            if len(found) >= limit:
                break
        infos = []
        for key in found:
            info = _holder_info(lock, resource_from_lock_key(key))
            if info is not None:  # None: released or expired since SCAN saw it
                infos.append(info)
    except RedisError as exc:
        raise LockUnavailable(prefix or "*", str(exc)) from exc
    return sorted(infos, key=lambda info: info.resource)


@dataclass(frozen=True)
class ShownLease:
    """The lease an operator was shown, as a page posts it back: what a break compares
    with the lease held (a ``HolderInfo`` has both too). No owner: the page showed no
    lease, and one held now is not one the operator chose to break."""

    token: int | None
    owner: str


NOTHING_SHOWN = ShownLease(token=None, owner="")


class HolderChanged(LockError):
    """The lease is no longer the one the operator was shown: nothing was broken.

    ``holder`` is who holds it now (another grant, or the same one whose token moved),
    ``token`` and ``owner`` what the operator was shown. The edge that asked says so:
    a 409 page naming ``holder``, an admin warning, ``manage.py locks break``'s exit 75.
    """

    outcome = Outcome.CONFLICT

    def __init__(self, resource: str, *, holder: HolderInfo, token: int | None, owner: str):
        self.resource = resource
        self.holder = holder
        self.token = token
        self.owner = owner
        super().__init__(
            f"{resource} is now held by {holder.label or holder.owner} (token {holder.token}), "
            f"not the lease shown (token {token}): nothing was broken"
        )


def break_lease(
    resource: str,
    *,
    token: int | None,
    by: str,
    reason: str,
    owner: str = "",
    scope: str = "",
    ip: str | None = None,
    lock: FenceLock | None = None,
) -> HolderInfo | None:
    """Delete the lease on ``resource`` if it is still the one the operator was shown;
    return who held it, or None when nothing is held.

    ``token`` is the holder's token as the operator saw it (``HolderInfo.token``: ``None``
    for a lease shown without one), and ``owner``, when given, its owner id
    (``HolderInfo.owner``). Both are compared with the lease in the same Lua script that
    deletes it: a lease granted since (a healthy holder that took over) is left alone and
    ``HolderChanged`` names it, recorded in the audit as outcome ``conflict``.

    For a holder that is stuck (hung, partitioned, holding a long TTL): the next grant
    gets a larger token, so once that holder commits, the fence refuses the broken
    holder's late write — breaking a lease is as safe as letting it expire. ``by`` (who)
    and ``reason`` are required, and recorded in the audit as outcome ``broken`` with the
    broken holder's token; nothing is recorded when nothing was held. The holder learns of
    it at its next extend (``lease.lost``, ``on_lost``).
    """
    _check_break(resource, token=token, by=by, reason=reason)
    lock = lock or FenceLock()
    args = ["" if token is None else str(token), owner or ""]
    with tracing.operation_span("locking.break_lease", resource) as span:
        try:
            reply = lock.scripts.break_lease(
                keys=[lock_key(resource), fence_key(resource)], args=args
            )
        except RedisError as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        if not reply:
            logger.info("nothing to break: no lease held", extra={"resource": resource})
            return None
        deleted, *lease = reply
        broke = bool(int(deleted))
        found = _parse_holder(resource, *lease)
        tracing.set_outcome(span, Outcome.BROKEN if broke else Outcome.CONFLICT)
        if found.token is not None:
            span.set_attribute(tracing.FENCE_TOKEN, found.token)
    _record_break(
        resource,
        found,
        broke=broke,
        token=token,
        by=by,
        reason=reason,
        scope=scope,
        ip=ip,
        using=lock.using,
    )
    if not broke:
        raise HolderChanged(resource, holder=found, token=token, owner=owner)
    return found


def _check_break(resource: str, *, token: int | None, by: str, reason: str) -> None:
    """Refuse (``ValueError``) a break without who, why, or a whole token shown."""
    validate_resource(resource)
    if not by.strip():
        raise ValueError("break_lease() needs who breaks the lease (by=…)")
    if not reason.strip():
        raise ValueError("break_lease() needs a reason")
    if token is not None and (type(token) is not int or token < 0):
        raise ValueError(f"break_lease() needs the token shown as a whole number, got {token!r}")


def _record_break(
    resource: str,
    found: HolderInfo,
    *,
    broke: bool,
    token: int | None,
    by: str,
    reason: str,
    scope: str,
    ip: str | None,
    using: str,
) -> None:
    """Audit a break: outcome ``broken`` with the broken holder's token, or ``conflict``
    naming who holds the lease now, when it was no longer the one shown."""
    since = f" since {found.acquired_at:%Y-%m-%d %H:%M:%S} UTC" if found.acquired_at else ""
    holder = found.label or found.owner
    if broke:
        outcome, detail = Outcome.BROKEN, f"lease of {holder}{since} broken: {reason.strip()}"
    else:
        outcome = Outcome.CONFLICT
        detail = (
            f"break refused: the lease shown (token {token}) is now "
            f"{holder}'s{since}: {reason.strip()}"
        )
    record_fence_event(
        resource=resource,
        outcome=outcome,
        token=found.token,
        actor=by,
        detail=detail,
        scope=scope,
        operation=BREAK_OPERATION,
        ip=ip,
        using=using,
    )


def _holder_info(lock: FenceLock, resource: str) -> HolderInfo | None:
    pipe = lock.client.pipeline(transaction=False)
    pipe.get(lock_key(resource))
    pipe.pttl(lock_key(resource))
    pipe.get(fence_key(resource))
    value, pttl, counter = pipe.execute()
    if value is None or int(pttl) == NO_KEY:
        return None  # released or expired (between the GET and the PTTL, too)
    return _parse_holder(resource, value, pttl, counter)


# PTTL's answers that are not a time: the key has no TTL, or there is no key.
NO_TTL = -1
NO_KEY = -2


def _parse_holder(resource: str, value, pttl, counter) -> HolderInfo:
    owner, acquired_at, label = parse_lock_value(text(value))
    return HolderInfo(
        resource=resource,
        owner=owner,
        label=label,
        acquired_at=acquired_at,
        ttl_left=timedelta(milliseconds=max(int(pttl), 0)),
        token=int(counter) if counter is not None else None,
        state=HolderState.NO_EXPIRY if int(pttl) == NO_TTL else HolderState.HELD,
    )


class BreakLeaseForm(forms.Form):
    """Why an operator breaks a lease, and which: the one form of every page that does.

    A page that breaks the lease it was asked about posts ``resource`` with the reason and
    the lease it showed (``token`` and ``owner``, hidden fields filled by ``shown()``), so
    the break is of that lease and not of whoever holds the resource when the POST
    arrives. A page that chose the resources itself (the admin's selection) passes
    ``resource_field=False`` and names each one, with the lease it showed, to
    ``break_lease``.
    """

    resource = forms.CharField(max_length=200, widget=forms.HiddenInput)
    # The lease the page showed. No token: a lease shown without one (no counter); no
    # owner: no lease shown (nothing was held), so a lease held now is not broken.
    token = forms.IntegerField(min_value=0, required=False, widget=forms.HiddenInput)
    owner = forms.CharField(max_length=200, required=False, widget=forms.HiddenInput)
    reason = forms.CharField(
        label=_("Reason"),
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=_("Recorded in the audit with your name, e.g. “worker hung”."),
        error_messages={"required": _("Say why the lease is broken.")},
    )

    def __init__(self, *args: Any, resource_field: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not resource_field:
            for name in ("resource", "token", "owner"):
                del self.fields[name]

    @classmethod
    def shown(cls, holder: HolderInfo, data=None) -> "BreakLeaseForm":
        """The form of a page that shows ``holder``: its lease in the hidden fields (a POST's
        ``data`` keeps what was typed, with the lease shown now)."""
        lease = {"resource": holder.resource, "token": holder.token, "owner": holder.owner}
        if data is not None:
            data = data.copy()
            for name, value in lease.items():
                data[name] = "" if value is None else value
        return cls(data, initial=lease)

    def clean_resource(self) -> str:
        try:
            return validate_resource(self.cleaned_data["resource"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def break_lease(
        self,
        request: HttpRequest,
        resource: str | None = None,
        *,
        shown: "ShownLease | HolderInfo | None" = None,
        scope: str = "",
        lock: FenceLock | None = None,
    ) -> HolderInfo | None:
        """Break the lease of ``resource`` (default: the form's) as the request's user, if
        it is still the lease shown (``shown``, default: the form's token and owner):
        ``break_lease`` with this form's reason and the request's address. A page that
        showed no lease (``NOTHING_SHOWN``) breaks none: ``HolderChanged`` if one is held
        now, else None."""
        resource = resource or self.cleaned_data["resource"]
        if shown is None:
            shown = ShownLease(token=self.cleaned_data["token"], owner=self.cleaned_data["owner"])
        if not shown.owner:
            held = holder_of(resource, lock=lock)
            if held is not None:
                raise HolderChanged(resource, holder=held, token=None, owner="")
            return None
        return break_lease(
            resource,
            token=shown.token,
            owner=shown.owner,
            by=request.user.get_username(),
            reason=self.cleaned_data["reason"],
            scope=scope,
            ip=client_ip(request),
            lock=lock,
        )


def broken_message(broken: HolderInfo) -> str:
    """What the operator who broke a lease is told: the admin's message, the command's line."""
    return gettext("Broke the lease of %(holder)s on %(resource)s (token %(token)s).") % {
        "holder": broken.label or broken.owner,
        "resource": broken.resource,
        "token": broken.token,
    }


def changed_message(changed: HolderChanged) -> str:
    """What the operator whose break was refused is told: who holds the lease now."""
    return gettext(
        "The lease on %(resource)s is now held by %(holder)s (token %(token)s), not the "
        "lease you were shown (token %(shown)s): nothing was broken."
    ) % {
        "resource": changed.resource,
        "holder": changed.holder.label or changed.holder.owner,
        "token": _token_text(changed.holder.token),
        "shown": _token_text(changed.token),
    }


def _token_text(token: int | None) -> str:
    return "-" if token is None else str(token)


def client_ip(request) -> str | None:
    """The address an operator's request is recorded with: what ``LOCK_CLIENT_IP_CALLABLE``
    (a dotted path to ``f(request)``, e.g. the project's own proxy-aware one) answers, else
    ``REMOTE_ADDR``; ``None`` when that is not an IP address."""
    path = setting("LOCK_CLIENT_IP_CALLABLE")
    if path:
        return import_string(path)(request)
    try:
        return str(ipaddress.ip_address(request.META.get("REMOTE_ADDR", "").strip()))
    except ValueError:
        return None
