"""Tenancy: the one answer to "which association(s), as whom", asked by every entry point.

``organizations_for`` (the associations an actor acts for) and ``row_for`` (a row, only if
it is in one of them) raise ``OutsideTenancy`` alike whether the association exists
elsewhere or not at all. Only ``organizations_for`` marks a user staff of what it found.
A page asks through ``OrganizationMixin`` (``organization_for``: another association's
slug is a 404). docs/security.md, "Tenant isolation: one mechanism".
"""

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext as _

from hoa.answers.refusals import Refusal, sentence
from hoa.answers.table import Answer, Audience
from hoa.models import Organization
from hoa.models.organizations import TenantQuerySet, staff_of
from hoa.security.audit import Reason, deny_request, record_denial, shown

__all__ = [
    "OrganizationMixin",
    "OutsideTenancy",
    "TenantQuerySet",
    "organization_for",
    "organizations_for",
    "require_permission",
    "row_for",
]


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


# -- the pages ------------------------------------------------------------------------------


def organization_for(user, slug: str, *, request=None, operation: str = "") -> Organization:
    """Return the organization ``slug`` if ``user`` is its staff (or a superuser), else 404
    (the resolver, ``hoa.tenancy.organizations_for``, decides and audits).

    404 rather than 403: staff of one association must not learn that another exists.
    """
    try:
        (organization,) = organizations_for(user, slug=slug, request=request, operation=operation)
    except OutsideTenancy as exc:
        raise Http404 from exc
    return organization


def require_permission(user, perm: str) -> None:
    """Raise 403 unless ``user`` has the model permission ``perm``."""
    if not user.has_perm(perm):
        raise PermissionDenied


class OrganizationMixin(LoginRequiredMixin):
    """Resolve ``org_slug`` from the URL to an organization the user is staff of.

    Set ``permission_required`` to also demand a model permission (403 without it), and
    ``operation`` to name the fenced operation the view starts (for the audit). Refusals
    are audited: another association's slug (404), a missing permission (403), and an
    object id that exists in another association (the view's own 404).

    The view runs, and its page renders, in the association's time zone: times are shown
    and read in it, and "this month" is its own. ``request.organization`` is set too, so
    an error page (``hoa.answers.table.error_page``) keeps the association's layout.
    """

    permission_required: str | None = None
    operation = ""

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        self.organization = organization_for(
            request.user, kwargs["org_slug"], request=request, operation=self.operation
        )
        request.organization = self.organization
        if self.permission_required and not request.user.has_perm(self.permission_required):
            self._deny(Reason.PERMISSION, f"lacks {self.permission_required}", self.organization)
            raise PermissionDenied
        try:
            with timezone.override(self.organization.zone):
                response = super().dispatch(request, *args, **kwargs)
                if hasattr(response, "render") and not response.is_rendered:
                    response.render()  # a TemplateResponse renders here, in the zone
            return response
        except Http404:
            owner = self._owner_elsewhere(kwargs.get("pk"))
            if owner is not None and owner.pk != self.organization.pk:
                self._deny(Reason.TENANT, "object of another association", owner)
            raise

    def _deny(self, reason: Reason, note: str, organization: Organization) -> None:
        deny_request(
            self.request,
            reason=reason,
            note=note,
            organization=organization,
            operation=self.operation,
        )

    def _owner_elsewhere(self, pk) -> Organization | None:
        """The organization owning the id this view could not find here, if it exists."""
        # URL ids are canonical (<id:pk>, hoa.web.fields): within a bigint.
        if pk is None or not hasattr(self, "get_queryset") or not 0 < int(pk) < 2**63:
            return None
        rows = self.get_queryset().model._default_manager.filter(pk=pk)
        tenant_path = getattr(rows, "tenant_path", None)
        if tenant_path is None:
            return None
        owner_id = rows.values_list(tenant_path or "pk", flat=True).first()
        return Organization(pk=owner_id) if owner_id is not None else None

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["organization"] = self.organization
        return context
