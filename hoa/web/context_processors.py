"""Template context every page gets."""

from dataclasses import dataclass

from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from hoa.operations import Link, every_pages
from hoa.security.permissions import is_operator

# The frame's own entries of an organization's navigation, among the operations' links.
FRAME_LINKS = (Link(_("Complaints"), "complaints:complaints", order=20),)


@dataclass(frozen=True)
class NavLink:
    label: str
    url: str
    current: bool  # the page shown is this entry's or one below it


def organization_links(request) -> dict:
    """An organization's navigation (``base.html``): the frame's entries and the fenced
    operations' links, in their order; an entry is current on its page and every page
    under its address (a month's page under its list, an action's POST under its complaint)."""
    match = getattr(request, "resolver_match", None)
    slug = match.kwargs.get("org_slug") if match else None
    if slug is None and getattr(request, "organization", None) is not None:
        slug = request.organization.slug  # an error page of its (hoa.answers.table)
    if slug is None:
        return {"organization_links": []}
    links = [*FRAME_LINKS, *(link for pages in every_pages() for link in pages.links)]
    shown = []
    for link in sorted(links, key=lambda link: link.order):
        url = reverse(link.url_name, args=[slug])
        shown.append(NavLink(link.label, url, request.path.startswith(url)))
    return {"organization_links": shown}


def viewer(request) -> dict:
    """Whether the viewer is an operator: tokens, leases and fenced attempts are theirs to
    read; office staff get the same pages without them. And whether the admin has
    anything for them, which is when the menu offers it."""
    user = getattr(request, "user", None)
    return {
        "is_operator": is_operator(user),
        "uses_admin": lambda: uses_admin(user),  # asked only where the menu is drawn
    }


def uses_admin(user) -> bool:
    """Whether the admin shows ``user`` anything: staff status and a permission on some
    model (office staff write notices there; operators read the fenced attempts)."""
    if user is None or not (user.is_active and user.is_staff):
        return False
    return user.is_superuser or bool(user.get_all_permissions())
