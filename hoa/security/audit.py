"""Who is asking, how often (the abuse limits), and the record of every refusal.

Every refused request or action is written as an ``AccessDenial`` (superusers read them
in the admin, filtered by reason, operation and association, searched by actor, address,
resource and detail):

- ``actor``: the username, ``anonymous`` before login; commands add the OS user;
- ``ip``: the client's address (``client_ip``);
- ``resource``: the request path, or the command's name;
- ``organization``: the association the refused request targeted, when there was one;
- ``reason``: permission, tenant (another association's page or object, answered 404),
  rate limit (answered 429) or CSRF; ``detail`` says what was refused.

Refusals by the fenced services themselves (an actor who may not generate or assign) are
fenced attempts on a resource and are recorded with them, as ``FenceEvent`` rows with
outcome ``denied``; the fenced outcomes are recorded by ``locking.run_fenced``.

Anyone can cause a refusal, so writing every one would let a flood of forged requests fill
the table: past ``AUDIT_DENIAL_RATE`` per client address a refusal is logged, not written.

Rate counting is django-ratelimit's (fixed windows in the default cache, django-redis).
``count`` wraps it so that an unreachable cache lets requests through (logged) instead of
turning every page into a 500: the fenced operations answer 503 on their own when Redis
is down, and sign-in keeps working.

The abuse limits: fenced POSTs per user and per address, sign-ins per address, and a
lockout after repeated failed sign-ins for one username from one address. Sized for
people, configurable by environment (docs/security.md): ``FENCED_POST_RATE`` (30/m per
user), ``FENCED_POST_IP_RATE`` (120/m per address), ``LOGIN_RATE`` (10/m per address),
``LOGIN_LOCKOUT_RATE`` (5 failures per 15 minutes per username and address),
``PASSWORD_RESET_RATE`` (5 reset requests per 15 minutes per address).
``RATELIMIT_ENABLE=0`` turns every limit off (benchmarks, load tests).

A request over a limit raises ``TooManyRequests`` (django-ratelimit's ``Ratelimited``);
its middleware hands it to ``RATELIMIT_VIEW``, the 429 page, which audits the refusal.
The lockout is keyed by username *and* address, so nobody can lock a colleague out from
elsewhere; ``LOGIN_RATE`` bounds how many usernames one address may try.
"""

import ipaddress
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import NoReturn, TypedDict

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, transaction
from django.http import HttpRequest
from django.utils.encoding import iri_to_uri
from django.utils.translation import gettext as _
from django_ratelimit.core import get_usage
from django_ratelimit.exceptions import Ratelimited
from django_redis.exceptions import ConnectionInterrupted
from redis.exceptions import RedisError

from hoa.models import AccessDenial, Organization
from locking import Outcome

logger = logging.getLogger(__name__)

ANONYMOUS = "anonymous"

# Why a request was refused (``AccessDenial.reason``).
Reason = AccessDenial.Reason


# -- who is asking -------------------------------------------------------------------------


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: ``REMOTE_ADDR``, or ``CLIENT_IP_HEADER`` when configured.

    The header is trusted only when the deployment says a proxy always overwrites it
    (opt-in, like ``SECURE_PROXY_SSL_HEADER``); a request without it did not come through
    the proxy (a local probe) and is known by ``REMOTE_ADDR``. Anything that is not an IP
    address is ``None``: it must not reach the audit table's address column.
    """
    raw = ""
    if settings.CLIENT_IP_HEADER:
        raw = request.META.get("HTTP_" + settings.CLIENT_IP_HEADER.upper().replace("-", "_"), "")
    raw = raw or request.META.get("REMOTE_ADDR", "")
    try:
        return str(ipaddress.ip_address(str(raw).strip()))
    except ValueError:
        return None


def shown(value: object, *, limit: int = 40) -> str:
    """``value`` fit to quote back in a message: printable, on one line, at most ``limit``
    characters (control characters escaped, the rest cut off with an ellipsis)."""
    text = "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in str(value)
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def request_actor(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return user.get_username()
    return ANONYMOUS


def request_resource(request: HttpRequest) -> str:
    """The request path, percent-encoded (no spaces or controls), cut to the column."""
    return iri_to_uri(request.path)[:200]


# -- rate counting -------------------------------------------------------------------------


class Usage(TypedDict):
    count: int
    limit: int
    should_limit: bool
    time_left: int


@dataclass(frozen=True)
class Limit:
    """One rate limit: a named counter, the setting holding its rate, and what it counts by."""

    group: str
    rate_setting: str
    key: Callable[[HttpRequest, str], str]  # (request, subject) -> the counter's key

    @property
    def rate(self) -> str:
        return getattr(settings, self.rate_setting)


def address_key(request: HttpRequest, subject: str = "") -> str:
    """The client's address; IPv6 clients by their /64, which one host usually holds."""
    address = client_ip(request)
    if address is None:
        return "unknown"
    if ":" in address:
        return str(ipaddress.ip_network(f"{address}/64", strict=False).network_address)
    return address


def user_key(request: HttpRequest, subject: str = "") -> str:
    """The signed-in user (the address before sign-in)."""
    if request.user.is_authenticated:
        return f"user:{request.user.pk}"
    return f"ip:{address_key(request)}"


def count(
    request: HttpRequest, limit: Limit, *, increment: bool = True, subject: str = ""
) -> Usage | None:
    """Count one request against ``limit`` (or only read it); ``None``: not limited now."""
    if getattr(request, "rate_limits_unavailable", False):
        return None  # the cache failed earlier in this request: do not wait on it again
    try:
        return get_usage(
            request,
            group=limit.group,
            key=lambda _group, req: limit.key(req, subject),
            rate=limit.rate,
            increment=increment,
        )
    except (ConnectionInterrupted, RedisError) as exc:
        request.rate_limits_unavailable = True
        logger.warning(
            "rate limit not checked: the cache is unavailable",
            extra={"limit": limit.group, "error": exc.__class__.__name__},
        )
        return None


AUDITED_DENIALS = Limit("audit-denials", "AUDIT_DENIAL_RATE", address_key)


# -- the abuse limits ----------------------------------------------------------------------


def _username_and_address(request, username: str) -> str:
    return f"{username.casefold()}|{address_key(request)}"


FENCED_POSTS_PER_USER = Limit("fenced-post:user", "FENCED_POST_RATE", user_key)
FENCED_POSTS_PER_ADDRESS = Limit("fenced-post:ip", "FENCED_POST_IP_RATE", address_key)
SIGN_INS_PER_ADDRESS = Limit("login:ip", "LOGIN_RATE", address_key)
FAILED_SIGN_INS = Limit("login-failures", "LOGIN_LOCKOUT_RATE", _username_and_address)
PASSWORD_RESETS_PER_ADDRESS = Limit("password-reset:ip", "PASSWORD_RESET_RATE", address_key)


class TooManyRequests(Ratelimited):
    """A limit was reached: nothing was done. Carries the sentence the 429 page shows."""

    def __init__(self, *, limit: Limit, retry_after: int, message: str):
        self.limit = limit
        self.retry_after = retry_after
        self.message = message
        super().__init__(message)


def _seconds_left(usage: Usage) -> int:
    return max(1, usage["time_left"])


def _refuse(limit: Limit, usage: Usage, message: str, *, minutes: bool = False) -> NoReturn:
    """Raise ``TooManyRequests`` for ``limit``: ``message`` with the seconds (or the minutes)
    left until it opens again."""
    seconds = _seconds_left(usage)
    left = {"minutes": math.ceil(seconds / 60)} if minutes else {"seconds": seconds}
    raise TooManyRequests(limit=limit, retry_after=seconds, message=message % left)


def check_fenced_post(request) -> None:
    """Count one fenced POST for the user and the address; raise past either limit."""
    for limit in (FENCED_POSTS_PER_USER, FENCED_POSTS_PER_ADDRESS):
        usage = count(request, limit)
        if usage is not None and usage["should_limit"]:
            message = _(
                "Too many requests to run fenced operations in a short "
                "time; nothing was done. Try again in %(seconds)d seconds."
            )
            _refuse(limit, usage, message)


def _check_password_reset(request) -> None:
    usage = count(request, PASSWORD_RESETS_PER_ADDRESS)
    if usage is not None and usage["should_limit"]:
        message = _(
            "Too many password reset requests from your address. Try again in %(minutes)d minutes."
        )
        _refuse(PASSWORD_RESETS_PER_ADDRESS, usage, message, minutes=True)


def _check_sign_in(request) -> None:
    username = request.POST.get(get_user_model().USERNAME_FIELD, "")
    attempts = count(request, SIGN_INS_PER_ADDRESS)
    if attempts is not None and attempts["should_limit"]:
        message = _(
            "Too many sign-in attempts from your address. Try again in %(seconds)d seconds."
        )
        _refuse(SIGN_INS_PER_ADDRESS, attempts, message)
    # Only read here: failures are counted by count_failed_sign_in, after authenticate().
    failures = count(request, FAILED_SIGN_INS, increment=False, subject=username)
    if failures is not None and failures["count"] >= failures["limit"]:
        message = _(
            "Sign-in for this account is locked after too many failed attempts from your "
            "address. Try again in %(minutes)d minutes."
        )
        _refuse(FAILED_SIGN_INS, failures, message, minutes=True)


def _checked_on_post(check):
    """A view decorator that runs ``check(request)`` before the view on each POST; the check
    refuses by raising ``TooManyRequests``."""

    def decorate(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if request.method == "POST":
                check(request)
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


# A view whose POST starts a fenced operation; a login view (sign-ins per address, then the
# username+address lockout); the password reset view (requests per address: each may mail).
limit_fenced_posts = _checked_on_post(check_fenced_post)
limit_sign_ins = _checked_on_post(_check_sign_in)
limit_password_resets = _checked_on_post(_check_password_reset)


def count_failed_sign_in(sender, credentials, request=None, **kwargs) -> None:
    """``user_login_failed`` receiver: one more failure for this username and address."""
    if request is None:  # authenticate() called outside a request (a script, a test)
        return
    username = credentials.get(get_user_model().USERNAME_FIELD) or ""
    count(request, FAILED_SIGN_INS, subject=str(username))


# -- the record of refusals ----------------------------------------------------------------


def record_denial(
    *,
    reason: Reason,
    note: str,
    resource: str,
    actor: str,
    ip: str | None = None,
    organization: Organization | None = None,
    operation: str = "",
) -> AccessDenial | None:
    """Write one ``AccessDenial``; never raise on a database error (the answer matters more)."""
    log_extra = {"resource": resource, "outcome": Outcome.DENIED, "actor": actor, "reason": reason}
    logger.info("request denied (%s): %s", reason, note, extra=log_extra)
    try:
        # A savepoint: a failed insert inside an admin view's transaction must not break it.
        with transaction.atomic():
            return AccessDenial.objects.create(
                reason=reason,
                detail=note,
                resource=resource[:200],
                actor=actor[:200],
                ip=ip,
                organization=organization,
                operation=operation[:50],
            )
    except DatabaseError:
        logger.exception("could not record an access denial", extra=log_extra)
        return None


def deny_request(
    request: HttpRequest,
    *,
    reason: Reason,
    note: str,
    organization: Organization | None = None,
    operation: str = "",
) -> None:
    """Record that ``request`` was refused, unless its address is past its audit budget."""
    # The site's 403 handler records refusals nobody recorded (the admin's own, say);
    # this mark keeps it from recording this one a second time.
    request.access_denial_recorded = True
    actor, ip = request_actor(request), client_ip(request)
    budget = count(request, AUDITED_DENIALS)
    if budget is not None and budget["should_limit"]:
        logger.warning(
            "request denied (%s); not written: too many refusals from %s",
            reason,
            ip,
            extra={
                "resource": request_resource(request),
                "outcome": Outcome.DENIED,
                "actor": actor,
            },
        )
        return
    record_denial(
        reason=reason,
        note=note,
        resource=request_resource(request),
        actor=actor,
        ip=ip,
        organization=organization,
        operation=operation,
    )
