"""Outbound webhook calls shared by the billing and dispatch clients.

One POST per fenced attempt, carrying:

- ``Idempotency-Key``: the business key, so the receiver can collapse retries;
- ``X-Fencing-Token``: the lease's token, so the receiver can refuse a stale holder;
- ``X-Timestamp``: when it was sent (seconds since the epoch);
- ``X-Signature: sha256=<hex HMAC-SHA256 of the body>`` keyed with
  ``WEBHOOK_SIGNING_SECRET`` (omitted when no secret is configured).

The body repeats the three values the receiver acts on (``idempotency_key``,
``fencing_token``, ``sent_at``), so the signature over the body covers them too: a captured
call cannot be replayed late or with another key or token, and ``verify`` checks that the
headers agree with the signed body.

See docs/security.md for how a receiver verifies and uses them.
"""

import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass

import requests
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Signature"
TIMESTAMP_HEADER = "X-Timestamp"


class ExternalCallFailed(Exception):
    """The external system refused, failed or timed out; nothing was written."""

    def __init__(self, url: str, reason: str, status: int | None = None):
        self.url = url
        self.reason = reason
        self.status = status
        super().__init__(f"call to {url} failed: {reason}")


@dataclass(frozen=True)
class CallResult:
    skipped: bool
    status: int | None = None


# Fields the body carries besides the business payload: the signed copies of the headers.
SIGNED_FIELDS = ("idempotency_key", "fencing_token", "sent_at")


def sign(body: bytes, secret: str) -> str:
    """Return the ``X-Signature`` value for ``body``: ``sha256=`` + hex HMAC-SHA256."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(
    body: bytes,
    timestamp: str,
    signature: str,
    secret: str,
    *,
    idempotency_key: str,
    token: str | int,
    tolerance: int = 300,
) -> bool:
    """Check a received webhook.

    The signature is the body's; the timestamp is recent; and the headers the receiver acts
    on (timestamp, idempotency key, fencing token) are the ones the signed body carries.
    """
    try:
        age = abs(time.time() - int(timestamp))
        token = int(token)
    except (TypeError, ValueError):
        return False
    if age > tolerance or not secret:
        return False
    if not hmac.compare_digest(sign(body, secret).encode(), (signature or "").encode()):
        return False
    try:
        signed = json.loads(body)
    except ValueError:
        return False
    return isinstance(signed, dict) and (
        signed.get("idempotency_key") == idempotency_key
        and signed.get("fencing_token") == token
        and signed.get("sent_at") == int(timestamp)
    )


_session = requests.Session()


def post_fenced(url: str, payload: dict, *, idempotency_key: str, token: int) -> CallResult:
    """POST ``payload`` once to ``url`` with the fencing headers; raise ``ExternalCallFailed``.

    An empty ``url`` means the integration is not configured: the call is skipped (logged).
    """
    if not url:
        logger.info(
            "external call skipped: no URL configured",
            extra={"idempotency_key": idempotency_key, "token": token},
        )
        return CallResult(skipped=True)
    sent_at = int(time.time())
    clash = set(SIGNED_FIELDS) & payload.keys()
    if clash:
        raise ValueError(f"payload may not use the signed field names {sorted(clash)}")
    envelope = {
        **payload,
        "idempotency_key": idempotency_key,
        "fencing_token": token,
        "sent_at": sent_at,
    }
    body = json.dumps(envelope, cls=DjangoJSONEncoder, sort_keys=True).encode()
    timestamp = str(sent_at)
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": idempotency_key,
        "X-Fencing-Token": str(token),
        TIMESTAMP_HEADER: timestamp,
    }
    if settings.WEBHOOK_SIGNING_SECRET:
        headers[SIGNATURE_HEADER] = sign(body, settings.WEBHOOK_SIGNING_SECRET)
    try:
        response = _session.post(
            url, data=body, headers=headers, timeout=settings.EXTERNAL_CALL_TIMEOUT_SECONDS
        )
    except requests.Timeout as exc:
        raise ExternalCallFailed(url, "timed out") from exc
    except requests.RequestException as exc:
        raise ExternalCallFailed(url, exc.__class__.__name__) from exc
    if not 200 <= response.status_code < 300:
        raise ExternalCallFailed(url, f"HTTP {response.status_code}", response.status_code)
    return CallResult(skipped=False, status=response.status_code)
