"""Abuse limits: fenced POSTs per user and per address, sign-ins per address, and a
lockout after repeated failed sign-ins for one username from one address.

Sized for people, configurable by environment (docs/security.md): ``FENCED_POST_RATE``
(30/m per user), ``FENCED_POST_IP_RATE`` (120/m per address), ``LOGIN_RATE`` (10/m per
address), ``LOGIN_LOCKOUT_RATE`` (5 failures per 15 minutes per username and address),
``PASSWORD_RESET_RATE`` (5 reset requests per 15 minutes per address).
``RATELIMIT_ENABLE=0`` turns every limit off (benchmarks, load tests).

A request over a limit raises ``TooManyRequests`` (django-ratelimit's ``Ratelimited``);
its middleware hands it to ``RATELIMIT_VIEW``, the 429 page, which audits the refusal.
The lockout is keyed by username *and* address, so nobody can lock a colleague out from
elsewhere; ``LOGIN_RATE`` bounds how many usernames one address may try.
"""

import math
from functools import wraps

from django.contrib.auth import get_user_model
from django.utils.translation import gettext as _
from django_ratelimit.exceptions import Ratelimited

from hoa.security.audit import Limit, Usage, address_key, count, user_key


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


def check_fenced_post(request) -> None:
    """Count one fenced POST for the user and the address; raise past either limit."""
    for limit in (FENCED_POSTS_PER_USER, FENCED_POSTS_PER_ADDRESS):
        usage = count(request, limit)
        if usage is not None and usage["should_limit"]:
            seconds = _seconds_left(usage)
            raise TooManyRequests(
                limit=limit,
                retry_after=seconds,
                message=_(
                    "Too many requests to run fenced operations in a short "
                    "time; nothing was done. Try again in %(seconds)d seconds."
                )
                % {"seconds": seconds},
            )


def limit_fenced_posts(view):
    """Decorate a view whose POST starts a fenced operation (``check_fenced_post``)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.method == "POST":
            check_fenced_post(request)
        return view(request, *args, **kwargs)

    return wrapped


def limit_sign_ins(view):
    """Decorate a login view: sign-ins per address, then the username+address lockout."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.method == "POST":
            _check_sign_in(request, request.POST.get(get_user_model().USERNAME_FIELD, ""))
        return view(request, *args, **kwargs)

    return wrapped


def limit_password_resets(view):
    """Decorate the password reset view: requests per address (each may send a mail)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.method == "POST":
            usage = count(request, PASSWORD_RESETS_PER_ADDRESS)
            if usage is not None and usage["should_limit"]:
                seconds = _seconds_left(usage)
                raise TooManyRequests(
                    limit=PASSWORD_RESETS_PER_ADDRESS,
                    retry_after=seconds,
                    message=_(
                        "Too many password reset requests from your address. Try again in "
                        "%(minutes)d minutes."
                    )
                    % {"minutes": math.ceil(seconds / 60)},
                )
        return view(request, *args, **kwargs)

    return wrapped


def _check_sign_in(request, username: str) -> None:
    attempts = count(request, SIGN_INS_PER_ADDRESS)
    if attempts is not None and attempts["should_limit"]:
        seconds = _seconds_left(attempts)
        raise TooManyRequests(
            limit=SIGN_INS_PER_ADDRESS,
            retry_after=seconds,
            message=_(
                "Too many sign-in attempts from your address. Try again in %(seconds)d seconds."
            )
            % {"seconds": seconds},
        )
    # Only read here: failures are counted by count_failed_sign_in, after authenticate().
    failures = count(request, FAILED_SIGN_INS, increment=False, subject=username)
    if failures is not None and failures["count"] >= failures["limit"]:
        seconds = _seconds_left(failures)
        raise TooManyRequests(
            limit=FAILED_SIGN_INS,
            retry_after=seconds,
            message=_(
                "Sign-in for this account is locked after too many failed attempts from your "
                "address. Try again in %(minutes)d minutes."
            )
            % {"minutes": math.ceil(seconds / 60)},
        )


def count_failed_sign_in(sender, credentials, request=None, **kwargs) -> None:
    """``user_login_failed`` receiver: one more failure for this username and address."""
    if request is None:  # authenticate() called outside a request (a script, a test)
        return
    username = credentials.get(get_user_model().USERNAME_FIELD) or ""
    count(request, FAILED_SIGN_INS, subject=str(username))
