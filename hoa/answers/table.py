"""One answer table: what kind of answer a refusal is, and how each caller gives it.

Every exception a fenced operation raises on purpose is a ``Refusal``: it says which kind
of answer it is (``answer``), how a page heads it (``title``) and what happened, in two
registers (translated, from the app's ``answers`` module):

- ``exc.message``, for staff (``Audience.STAFF``): the staff page and the admin action. It
  names people and what to do, never a fencing token, a host, a pid or a lease lifetime;
- ``str(exc)``, for operators (``Audience.OPERATORS``): the management command's line and
  the audit's detail. It keeps the technical facts (tokens, the holder's host and pid, the
  seconds the lease has left), because operators act on them. Most refusals say the same
  to both; ``busy``, ``superseded`` and the vendor refusals at commit say more here.

The staff page, the admin action and the management command then answer with one
``except <App>Error``:

=================  ======  =============  =========
kind               HTTP    admin message  exit code
=================  ======  =============  =========
retry              409     warning        75
bad request        400     error          1
forbidden          403     error          1
upstream failed    502     error          1
unavailable        503     error          1
=================  ======  =============  =========

75 is ``EX_TEMPFAIL`` from sysexits.h ("try again later"): cron wrappers treat it as not
an error. Nothing was written in any of these cases.
"""

from dataclasses import dataclass
from enum import StrEnum

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError

from hoa.answers.pages import conflict, error_page

EXIT_TEMPFAIL = 75


class Audience(StrEnum):
    """Who reads a refusal's sentence (the app's ``answers`` functions take ``audience=``)."""

    STAFF = "staff"  # pages and admin messages: people and what to do
    OPERATORS = "operators"  # commands and the audit: tokens, hosts, pids, seconds


class Answer(StrEnum):
    RETRY = "retry"  # someone else holds it or won: try again later (nothing is wrong)
    BAD_REQUEST = "bad-request"  # the request itself is wrong
    FORBIDDEN = "forbidden"  # the person may not do this
    UPSTREAM_FAILED = "upstream-failed"  # an external system refused or failed
    UNAVAILABLE = "unavailable"  # the lock service (Redis) cannot be reached


@dataclass(frozen=True)
class Channels:
    status: int
    level: int
    exit_code: int


ANSWERS = {
    Answer.RETRY: Channels(409, messages.WARNING, EXIT_TEMPFAIL),
    Answer.BAD_REQUEST: Channels(400, messages.ERROR, 1),
    Answer.FORBIDDEN: Channels(403, messages.ERROR, 1),
    Answer.UPSTREAM_FAILED: Channels(502, messages.ERROR, 1),
    Answer.UNAVAILABLE: Channels(503, messages.ERROR, 1),
}


class Refusal(Exception):
    """Base of the apps' own errors: nothing was written, and here is why.

    Built with the sentence staff read (``message``) and, when operators are told more,
    theirs (``detail``); ``str(exc)`` is the operators' sentence: what commands print and
    the audit records.
    """

    answer: Answer
    title: str = ""  # the heading of its page

    def __init__(self, message: str = "", *, detail: str = ""):
        super().__init__(message)
        self.detail = detail or message

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return str(self.detail)


def page(request, exc: Refusal, **conflict_options):
    """The page answering ``exc``: 409 with a retry, 403, or an error page.

    ``conflict_options`` go to ``conflict()`` (title, template, retry fields…) when the
    answer is a retry; when the refusal carries a lease still held (``busy``), the page
    links to its details for operators (the sentence names only the person holding it).
    """
    if exc.answer is Answer.FORBIDDEN:
        raise PermissionDenied(exc.message) from exc
    if exc.answer is Answer.RETRY:
        options = {
            "title": exc.title,
            "message": exc.message,
            "lease": getattr(exc, "busy", None),
            "retry_url": request.path,
            **conflict_options,
        }
        return conflict(request, **options)
    return error_page(request, ANSWERS[exc.answer].status, exc.title, exc.message)


def admin_message(modeladmin, request, exc: Refusal) -> None:
    """Report ``exc`` on the changelist with the level its kind deserves, in staff's words
    (the admin is where staff work too; operators read the audit and the lock page)."""
    modeladmin.message_user(request, exc.message, ANSWERS[exc.answer].level)


def command_error(exc: Refusal) -> CommandError:
    """The one line and exit code a management command answers ``exc`` with: the
    operators' sentence (``str(exc)``), tokens and holders included."""
    return CommandError(str(exc), returncode=ANSWERS[exc.answer].exit_code)
