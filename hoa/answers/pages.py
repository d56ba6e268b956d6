"""The pages every answer shares: the 303 after a POST, the 409 page, the error pages.

Each keeps the association's layout (its name, its navigation) when the address is one of
its pages and the viewer is its staff, and each offers a way back.
"""

import re
from collections.abc import Iterable, Mapping

from django.http import HttpResponseRedirect
from django.shortcuts import render

from hoa.models import Organization

# Every association's pages live under /orgs/<slug>/ (hoa/urls.py).
_ORGANIZATION_PATH = re.compile(r"/orgs/(?P<slug>[-a-zA-Z0-9_]+)/")


def organization_of(request) -> Organization | None:
    """The association whose page ``request`` is, for the layout of its answer.

    The one the view resolved (``OrganizationMixin`` sets ``request.organization``); else,
    for an answer given before any view ran (an address that matches nothing, a method the
    view does not take, an expired form), the one its address names if the viewer is its
    staff. Another association's name is never shown: it is looked up among the viewer's.
    """
    organization = getattr(request, "organization", None)
    if organization is not None:
        return organization
    user = getattr(request, "user", None)
    match = _ORGANIZATION_PATH.match(request.path_info)
    if match is None or user is None or not user.is_authenticated:
        return None
    organization = Organization.objects.for_user(user).filter(slug=match["slug"]).first()
    request.organization = organization  # the navigation reads it (context_processors)
    return organization


def conflict(
    request,
    *,
    title: str,
    message: str,
    lease=None,
    winner=None,
    retry_url="",
    template_name: str = "hoa/conflict.html",
    extra_context: dict | None = None,
    retry_fields: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
):
    """Render the 409 page for staff: who is doing it or did it, and what to do.

    ``message`` names the person (the refusal's staff sentence); ``lease`` is a
    ``LockHeld`` when the resource is busy, of which the page shows only a link to the lock
    page's details for operators (holder label, host, pid, token, lifetime stay there);
    ``winner`` describes the work that already won. A page whose
    retry must resend form fields passes a template extending ``hoa/conflict.html`` that
    fills its ``retry_fields`` block, and the values in ``extra_context``.

    The retry button re-posts ``retry_fields`` as hidden inputs; by default, the fields of
    the POST being answered (so "Try again" repeats exactly what was asked).
    """
    if retry_fields is None:
        retry_fields = _posted_fields(request)
    return render(
        request,
        template_name,
        {
            "organization": organization_of(request),
            **(extra_context or {}),
            "title": title,
            "message": message,
            "busy": lease,
            "winner": winner,
            "retry_url": retry_url,
            "retry_fields": _as_pairs(retry_fields),
        },
        status=409,
    )


def _posted_fields(request) -> list[tuple[str, str]]:
    """The submitted form fields, without the CSRF token (the retry form adds a fresh one)."""
    if request.method != "POST":
        return []
    return [
        (name, value)
        for name, values in request.POST.lists()
        if name != "csrfmiddlewaretoken"
        for value in values
    ]


def _as_pairs(fields) -> list[tuple[str, str]]:
    if isinstance(fields, Mapping):
        return [(str(name), str(value)) for name, value in fields.items()]
    return [(str(name), str(value)) for name, value in fields]


def error_page(request, status: int, title: str, message: str, *, back_url: str = ""):
    """The 4xx/5xx page: its title and sentence, in the association's layout (its name and
    navigation) when the request is one of an association's pages (``OrganizationMixin``
    sets ``request.organization``), with a way back (``back_url``, else the associations)."""
    return render(
        request,
        "hoa/error.html",
        {
            "title": title,
            "message": message,
            "status": status,
            "organization": organization_of(request),
            "back_url": back_url,
        },
        status=status,
    )


def see_other(url: str) -> HttpResponseRedirect:
    """A 303: the browser follows it with a GET, so a reload does not resend the POST."""
    response = HttpResponseRedirect(url)
    response.status_code = 303
    return response
