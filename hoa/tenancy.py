"""Tenancy: the one answer to "which association(s), as whom", asked by every entry point.

``organizations_for`` (the associations an actor acts for) and ``row_for`` (a row, only if
it is in one of them) raise ``OutsideTenancy`` alike whether the association exists
elsewhere or not at all. Only ``organizations_for`` marks a user staff of what it found.
docs/security.md, "Tenant isolation: one mechanism".
"""

from django.utils.translation import gettext as _

from hoa.answers.refusals import Refusal, sentence
from hoa.answers.table import Answer, Audience
from hoa.models import Organization
from hoa.models.organizations import TenantQuerySet, staff_of
from hoa.security.audit import Reason, deny_request, record_denial, shown

__all__ = ["OutsideTenancy", "TenantQuerySet", "organizations_for", "row_for"]


class OutsideTenancy(Refusal):
    """What was asked is not ``actor``'s (or does not exist): nothing was done.

    Facts: ``actor`` (the username, ``""`` for the operator at the shell), ``what``
    (``"organization"``, ``"invoice"``, ``"complaint"``…) and ``key`` (its slug or id).
    """

    answer = Answer.FORBIDDEN


@sentence.register
def _outside_sentence(refusal: OutsideTenancy, audience: Audience) -> str:
    facts = {"what": refusal.what, "key": shown(refusal.key), "actor": shown(refusal.actor)}
    if refusal.what == "organization":
        if refusal.actor:
            return _('No organization "%(key)s" for %(actor)s.') % facts
        return _('Unknown organization "%(key)s".') % facts
    if refusal.actor:
        return _("No %(what)s with id %(key)s for %(actor)s.") % facts
    return _("No %(what)s with id %(key)s.") % facts


def organizations_for(
    actor,
    *,
    slug: str | None = None,
    ids=None,
    every: bool = False,
    partial: bool = False,
    via: str = "",
    request=None,
    operation: str = "",
) -> list[Organization]:
    """Return the associations ``actor`` acts for, by pk: the one of ``slug``, those of
    ``ids`` (all of them, or ``OutsideTenancy``), or ``every`` one (exactly one of the three).

    ``partial``: with ``ids``, return those of ``actor``'s and leave the others out (a
    batch whose operations refuse the others themselves) instead of refusing.
    ``via`` (``cli:<login>``) or ``request`` (a page, the admin) say who asked, for the
    audit of a refusal; ``operation`` names the fenced operation it was for.
    """
    if (slug is not None) + (ids is not None) + bool(every) != 1:
        raise TypeError("organizations_for: give exactly one of slug, ids or every")
    reachable = (
        Organization.objects.all() if actor is None else Organization.objects.for_user(actor)
    )
    if every:
        found = list(reachable.order_by("pk"))
    elif slug is not None:
        found = list(reachable.filter(slug=slug))
        if not found:
            elsewhere = Organization.objects.filter(slug=slug).first()
            _refuse(actor, "organization", slug, elsewhere, via, request, operation)
    else:
        wanted = set(ids)
        found = list(reachable.filter(pk__in=wanted).order_by("pk"))
        missing = wanted - {organization.pk for organization in found}
        if missing and not partial:
            first = min(missing)
            elsewhere = Organization.objects.filter(pk=first).first()
            _refuse(actor, "organization", first, elsewhere, via, request, operation)
    if actor is not None:
        staff_of(actor).update(organization.pk for organization in found)
    return found


def row_for(
    actor, rows: TenantQuerySet, pk, *, what: str, via: str = "", request=None, operation: str = ""
):
    """Return the row ``pk`` of ``rows`` if it belongs to one of ``actor``'s associations
    (any, for the operator at the shell), else ``OutsideTenancy`` (``what`` names it)."""
    reachable = rows if actor is None else rows.for_user(actor)
    row = reachable.filter(pk=pk).first()
    if row is None:
        owner = None
        if actor is not None:
            path = rows.tenant_path or "pk"
            owner_id = rows.model._default_manager.filter(pk=pk).values_list(path, flat=True)
            owner_id = owner_id.first()
            owner = Organization(pk=owner_id) if owner_id is not None else None
        _refuse(actor, what, pk, owner, via, request, operation)
    return row


def _refuse(actor, what: str, key, elsewhere, via: str, request, operation: str):
    """Record the refusal when what was asked exists in another association, then raise."""
    username = actor.get_username() if actor is not None else ""
    if actor is not None and elsewhere is not None:
        if what == "organization":
            note = f"not staff of {shown(key, limit=80)}"  # a slug is at most 80
        else:
            note = f"{what} {shown(key)} of another association"
        if request is not None:
            deny_request(
                request,
                reason=Reason.TENANT,
                note=note,
                organization=elsewhere,
                operation=operation,
            )
        else:
            record_denial(
                reason=Reason.TENANT,
                note=note,
                resource=f"{what}:{shown(key)}",
                actor=" via ".join(part for part in (username, via) if part),
                organization=elsewhere,
                operation=operation,
            )
    raise OutsideTenancy(actor=username, what=what, key=key)
