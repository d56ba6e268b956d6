"""One answer table: what kind of answer a result or a refusal is, and how each edge gives it.

A service's result says whether it did the work now or found it done (``result.answer``:
``DONE``, ``ALREADY_DONE``); a refusal (``hoa.answers.refusals``) says which kind of answer
it is. The staff page, the admin action and the management command each turn that kind into
their answer through the one table below, with one ``except`` for the refusals:

==================  ======  =============  =========
kind                HTTP    admin message  exit code
==================  ======  =============  =========
done                303     success        0
already done        303     info           0
retry               409     warning        75
bad request         400     error          1
forbidden           403     error          1
upstream failed     502     error          1
unknown             202     warning        75
unavailable         503     error          1
partly failed       502     error          1
==================  ======  =============  =========

75 is ``EX_TEMPFAIL`` from sysexits.h ("try again later"): cron wrappers treat it as not an
error. Nothing was written for any refusal; "partly failed" is a batch's answer (the month
start) when some of its items were refused, each reported on its own line.

"unknown" is the one answer that is neither done nor refused: an outside call whose
outcome its answer does not tell (a timeout, a lost connection, a redirect, a 5xx). The
attempt is recorded (``hoa.models.OutsideCall``) and settled by the same key, by running
the same command again or by ``settle_outside_calls``; staff read "not known yet; it will
be settled". 202 (Accepted: "processing has not been completed"), a warning, and 75: the
same command again settles it.

What the edges say comes from the refusal, rendered when asked: ``exc.message`` for staff
(pages, admin messages: people and what to do, never a fencing token, a host, a pid or a
lease lifetime), ``str(exc)`` for operators (the command's line and the audit: tokens, the
holder's host and pid, the seconds the lease has left).

The pages every answer shares are here too, at the end: the 303 after a POST, the 409 page,
the error pages. Each keeps the association's layout (its name, its navigation) when the
address is one of its pages and the viewer is its staff, and each offers a way back.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError
from django.http import HttpResponseRedirect
from django.shortcuts import render

from hoa.models import Organization
from locking import Outcome

if TYPE_CHECKING:
    from hoa.answers.refusals import Refusal

EXIT_TEMPFAIL = 75


class Audience(StrEnum):
    """Who reads a refusal's sentence (the app's ``answers`` functions take ``audience=``)."""

    STAFF = "staff"  # pages and admin messages: people and what to do
    OPERATORS = "operators"  # commands and the audit: tokens, hosts, pids, seconds


class Answer(StrEnum):
    DONE = "done"  # done now
    ALREADY_DONE = "already-done"  # done before, by this or another attempt: nothing to do
    PARTLY_FAILED = "partly-failed"  # a batch: some of it could not be done (see its lines)
    RETRY = "retry"  # someone else holds it or won: try again later (nothing is wrong)
    # Someone else's change came first and decided it (another vendor assigned, the invoice
    # voided, the complaint closed): the same request can never succeed, so nothing offers
    # to send it again; the sentence says what to do instead.
    OVERTAKEN = "overtaken"
    BAD_REQUEST = "bad-request"  # the request itself is wrong
    FORBIDDEN = "forbidden"  # the person may not do this
    UPSTREAM_FAILED = "upstream-failed"  # an external system refused or could not be reached
    UNKNOWN = "unknown"  # an external system may have acted: recorded, to be settled
    UNAVAILABLE = "unavailable"  # the lock service (Redis) cannot be reached


class Done:
    """What every fenced operation's result shares: its ``outcome`` (committed now, or
    already done) says which kind of answer it is. ``hoa.fenced.Result`` subclasses it with
    the token, the row and the operation's words."""

    outcome: Outcome

    @property
    def answer(self) -> "Answer":
        return Answer.DONE if self.outcome == Outcome.COMMITTED else Answer.ALREADY_DONE


@dataclass(frozen=True)
class Channels:
    status: int
    level: int
    exit_code: int


ANSWERS = {
    Answer.DONE: Channels(303, messages.SUCCESS, 0),
    Answer.ALREADY_DONE: Channels(303, messages.INFO, 0),
    Answer.PARTLY_FAILED: Channels(502, messages.ERROR, 1),
    Answer.RETRY: Channels(409, messages.WARNING, EXIT_TEMPFAIL),
    Answer.OVERTAKEN: Channels(409, messages.WARNING, 1),
    Answer.BAD_REQUEST: Channels(400, messages.ERROR, 1),
    Answer.FORBIDDEN: Channels(403, messages.ERROR, 1),
    Answer.UPSTREAM_FAILED: Channels(502, messages.ERROR, 1),
    Answer.UNKNOWN: Channels(202, messages.WARNING, EXIT_TEMPFAIL),
    Answer.UNAVAILABLE: Channels(503, messages.ERROR, 1),
}


def page(request, exc: "Refusal", *, back_url: str = "", **conflict_options):
    """The page answering ``exc``: 409 (with "Try again" only when trying again can succeed:
    ``RETRY``, not ``OVERTAKEN``), 403, or an error page.

    ``conflict_options`` go to ``conflict()`` (title, template, retry fields…) on a 409; a
    page that offers a different request instead of an overtaken one (assign *this* vendor
    in place of the one that won) passes its own ``retry_url`` and label. When the refusal
    carries a lease still held (``busy``), the page links to its details for operators (the
    sentence names only the person holding it).
    ``back_url``: where the page's way back leads (the object the request was about).
    """
    if exc.answer is Answer.FORBIDDEN:
        raise PermissionDenied(exc.message) from exc
    if exc.answer in (Answer.RETRY, Answer.OVERTAKEN):
        options = {
            "title": exc.title,
            "message": exc.message,
            "lease": getattr(exc, "busy", None),
            "retry_url": request.path if exc.answer is Answer.RETRY else "",
            **conflict_options,
        }
        if back_url:
            options["extra_context"] = {**options.get("extra_context", {}), "back_url": back_url}
        return conflict(request, **options)
    status = ANSWERS[exc.answer].status
    return error_page(request, status, exc.title, exc.message, back_url=back_url)


def admin_message(modeladmin, request, exc: "Refusal") -> None:
    """Report ``exc`` on the changelist with the level its kind deserves, in staff's words
    (the admin is where staff work too; operators read the audit and the lock page)."""
    modeladmin.message_user(request, exc.message, ANSWERS[exc.answer].level)


def command_error(exc: "Refusal") -> CommandError:
    """The one line and exit code a management command answers ``exc`` with: the
    operators' sentence (``str(exc)``), tokens and holders included."""
    return CommandError(str(exc), returncode=ANSWERS[exc.answer].exit_code)


def done(request, result, url: str):
    """The 303 of a service's result: its message at its kind's level, then ``url``."""
    messages.add_message(request, ANSWERS[result.answer].level, result.message)
    return see_other(url)


def admin_done(modeladmin, request, result) -> None:
    """Report a service's result on the changelist at its kind's level."""
    modeladmin.message_user(request, result.message, ANSWERS[result.answer].level)


# -- the pages every answer shares -----------------------------------------------------

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
