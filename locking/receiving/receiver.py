"""The receiving side of a fenced call: refuse a token older than one already accepted.

``receive_call`` (any server) and ``fenced_receiver`` (a Django view) verify the sealed call,
then decide it with one ``INSERT … ON CONFLICT (scope, idempotency_key) DO UPDATE … WHERE
token < EXCLUDED.token`` on the key's ``ReceivedCall``, and run the handler in that same
transaction. The verdicts (``CallVerdict``: accepted, replaced, replayed, stale, conflict,
unverified, declined) and why: the documentation's 'The receiving side' page.
"""

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import wraps
from typing import Concatenate, ParamSpec

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.db.models import TextChoices
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from locking import tracing
from locking.conf import setting
from locking.receiving.signing import DEFAULT_TOLERANCE_SECONDS, FencedCall, open_call, seal_answer

logger = logging.getLogger(__name__)

STALE_STATUS = 409
CONFLICT_STATUS = 422
UNVERIFIED_STATUS = 401

# What a receiver's handler does with a call: returns the answer (2xx keeps it).
Handler = Callable[[FencedCall], HttpResponse]

P = ParamSpec("P")
# The view ``fenced_receiver`` decorates: ``view(request, call, *args, **kwargs)``.
ReceivingView = Callable[Concatenate[HttpRequest, FencedCall, P], HttpResponse]


class CallVerdict(TextChoices):
    """What the receiver made of one call (the table above)."""

    ACCEPTED = "accepted", "Accepted"
    REPLACED = "replaced", "Accepted, replacing an older token's call"
    REPLAYED = "replayed", "Replayed: answered as the first time"
    STALE = "stale", "Refused: a higher token was accepted"
    CONFLICT = "conflict", "Refused: the same token with different content"
    UNVERIFIED = "unverified", "Refused: not signed, or not verified"
    DECLINED = "declined", "Declined by the handler; nothing kept"


@dataclass(frozen=True)
class Receipt:
    """The receiver's decision on one call, and the answer to give (``response``).

    ``accepted`` is the token the key's record holds after the call (``None`` when there is
    none); ``call`` is ``None`` when the call did not verify.
    """

    verdict: CallVerdict
    response: HttpResponse
    call: FencedCall | None = None
    accepted: int | None = None


# One statement decides (see the module docstring). now() is the transaction's start.
_CLAIM_SQL = """
INSERT INTO locking_receivedcall AS received (
    scope, idempotency_key, token, content_digest, body, replaced_token, replacements,
    answer_status, answer_content_type, answer_body, first_received_at, received_at
)
VALUES (
    %(scope)s, %(key)s, %(token)s, %(digest)s, %(body)s, NULL, 0, 0, '', ''::bytea, now(), now()
)
ON CONFLICT (scope, idempotency_key) DO UPDATE SET
    token = EXCLUDED.token,
    content_digest = EXCLUDED.content_digest,
    body = EXCLUDED.body,
    replaced_token = received.token,
    replacements = received.replacements + 1,
    answer_status = 0,
    answer_content_type = '',
    answer_body = ''::bytea,
    received_at = EXCLUDED.received_at
WHERE received.token < EXCLUDED.token
RETURNING replaced_token
"""

# Why nothing changed: the row ON CONFLICT locked (it stays locked until the end).
_KEPT_SQL = """
SELECT token, content_digest, answer_status, answer_content_type, answer_body
FROM locking_receivedcall WHERE scope = %(scope)s AND idempotency_key = %(key)s
"""

_ANSWER_SQL = """
UPDATE locking_receivedcall
SET answer_status = %(status)s, answer_content_type = %(content_type)s, answer_body = %(body)s
WHERE scope = %(scope)s AND idempotency_key = %(key)s
"""


# With ``resource=``: the resource's highest token, raised or left (never lowered). An
# equal token passes: the same grant's other call (a cancellation after its dispatch).
_FENCE_SQL = """
INSERT INTO locking_receivedfence AS fence (scope, resource, token, received_at)
VALUES (%(scope)s, %(resource)s, %(token)s, now())
ON CONFLICT (scope, resource) DO UPDATE SET token = EXCLUDED.token, received_at = now()
WHERE fence.token <= EXCLUDED.token
RETURNING token
"""

_FENCED_SQL = """
SELECT token FROM locking_receivedfence WHERE scope = %(scope)s AND resource = %(resource)s
"""


class _Declined(Exception):
    """The handler answered outside 2xx: roll the claim back with whatever it wrote."""

    def __init__(self, response: HttpResponse):
        self.response = response


def receive_call(
    headers: Mapping[str, str],
    body: bytes,
    handle: Handler,
    *,
    scope: str,
    resource: Callable[[str], str | None] | None = None,
    secret: str | None = None,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    using: str | None = None,
) -> Receipt:
    """Verify a fenced call, decide it against the highest token kept for its key, and
    run ``handle(call)`` when it is accepted or replaces an older call; return the receipt.

    ``scope`` names the endpoint (its keys are its own, e.g. ``"billing"``). ``resource``,
    if given, maps a key to the resource its sender's lease was on (``None``: the key
    alone): a call is then also refused when any key of that resource has accepted a
    higher token (``ReceivedFence``), e.g. another vendor's dispatch for one complaint.
    ``secret`` defaults to ``LOCK_RECEIVER_SECRET``; with neither, ``ImproperlyConfigured``.
    ``using`` is the database of the records (default ``LOCK_DATABASE``): the handler's own
    writes belong there too, to commit with them.
    """
    secret = secret if secret is not None else setting("LOCK_RECEIVER_SECRET")
    if not secret:
        raise ImproperlyConfigured(
            "A fenced receiver needs a signing secret: set LOCK_RECEIVER_SECRET or pass secret=."
        )
    call = open_call(headers, body, secret=secret, endpoint=scope, tolerance=tolerance)
    if call is None:
        unverified = HttpResponse(
            json.dumps({"refused": "unverified"}).encode(),
            status=UNVERIFIED_STATUS,
            content_type="application/json",
        )
        return _decided(scope, CallVerdict.UNVERIFIED, unverified)
    using = using or setting("LOCK_DATABASE")
    try:
        with transaction.atomic(using=using):
            fenced = resource(call.idempotency_key) if resource is not None else None
            return _decide(call, handle, scope=scope, resource=fenced, using=using, secret=secret)
    except _Declined as declined:
        return _decided(scope, CallVerdict.DECLINED, declined.response, call)


def _decide(
    call: FencedCall, handle: Handler, *, scope: str, resource: str | None, using: str, secret: str
) -> Receipt:
    where = {"scope": scope, "key": call.idempotency_key}
    digest = call.content_digest
    with connections[using].cursor() as cursor:
        if resource is not None:
            fenced = {"scope": scope, "resource": resource}
            cursor.execute(_FENCE_SQL, {**fenced, "token": call.token})
            if cursor.fetchone() is None:  # another key of the resource has a higher token
                cursor.execute(_FENCED_SQL, fenced)
                (token,) = cursor.fetchone()
                response = _refusal(STALE_STATUS, "stale", call, secret, accepted=token)
                return _decided(scope, CallVerdict.STALE, response, call, accepted=token)
        cursor.execute(
            _CLAIM_SQL, {**where, "token": call.token, "digest": digest, "body": call.body}
        )
        claimed = cursor.fetchone()
        if claimed is None:
            cursor.execute(_KEPT_SQL, where)
            kept = cursor.fetchone()
            return _refused(call, scope, secret, *kept)
    (replaced,) = claimed
    call = replace(call, replaces=replaced)
    response = handle(call)
    if not 200 <= response.status_code < 300:
        raise _Declined(response)
    with connections[using].cursor() as cursor:
        cursor.execute(
            _ANSWER_SQL,
            {
                **where,
                "status": response.status_code,
                "content_type": response.get("Content-Type", ""),
                "body": response.content,
            },
        )
    verdict = CallVerdict.ACCEPTED if replaced is None else CallVerdict.REPLACED
    return _decided(scope, verdict, response, call, accepted=call.token)


def _refused(call, scope, secret, token, kept_digest, status, content_type, answer) -> Receipt:
    if token > call.token:
        response = _refusal(STALE_STATUS, "stale", call, secret, accepted=token)
        return _decided(scope, CallVerdict.STALE, response, call, accepted=token)
    if kept_digest != call.content_digest:
        response = _refusal(CONFLICT_STATUS, "conflict", call, secret, accepted=token)
        return _decided(scope, CallVerdict.CONFLICT, response, call, accepted=token)
    replay = HttpResponse(bytes(answer), status=status, content_type=content_type or None)
    return _decided(scope, CallVerdict.REPLAYED, replay, call, accepted=token)


def _refusal(status: int, refused: str, call: FencedCall, secret: str, **facts) -> HttpResponse:
    """A refusal of a verified ``call``, signed and naming it (``seal_answer``)."""
    sealed = seal_answer({"refused": refused, **facts}, call=call, secret=secret)
    response = HttpResponse(sealed.body, status=status, content_type="application/json")
    for name, value in sealed.headers.items():
        if name != "Content-Type":
            response[name] = value
    return response


def _decided(
    scope: str,
    verdict: CallVerdict,
    response: HttpResponse,
    call: FencedCall | None = None,
    *,
    accepted: int | None = None,
) -> Receipt:
    tracing.receiver_call(scope, verdict)
    logger.log(
        logging.WARNING if verdict == CallVerdict.CONFLICT else logging.INFO,
        "fenced call %s",
        verdict,
        extra={
            "receiver": scope,
            "idempotency_key": call.idempotency_key if call else None,
            "token": call.token if call else None,
            "accepted": accepted,
            "verdict": verdict,
        },
    )
    return Receipt(verdict, response, call, accepted)


def fenced_receiver(
    scope: str,
    *,
    resource: Callable[[str], str | None] | None = None,
    secret: str | None = None,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    using: str | None = None,
) -> Callable[[ReceivingView[P]], Callable[Concatenate[HttpRequest, P], HttpResponse]]:
    """Decorate a Django view that receives fenced calls: ``view(request, call, ...)``.

    The view runs only for a call that is accepted or replaces an older one (``call.
    replaces``), inside the receiver's transaction; its 2xx answer is kept and given again
    to a replay. Stale calls get 409, a reused token with other content 422, unverified
    ones 401, without the view. The view is exempt from CSRF (the signature authenticates
    the caller) and accepts POST only. Arguments as ``receive_call``.
    """

    def decorate(view: ReceivingView[P]) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
        @csrf_exempt
        @require_POST
        @wraps(view)
        def receiving(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
            receipt = receive_call(
                request.headers,
                request.body,
                lambda call: view(request, call, *args, **kwargs),
                scope=scope,
                resource=resource,
                secret=secret,
                tolerance=tolerance,
                using=using,
            )
            request.fenced_receipt = receipt
            return receipt.response

        # For check locking.E011, which walks the URLconf for receivers without a secret.
        receiving.fenced_receiver_scope = scope
        receiving.fenced_receiver_has_secret = bool(secret)
        return receiving

    return decorate
