"""Outbound webhook calls shared by the billing and dispatch clients.

One POST per fenced attempt, carrying:

- ``Idempotency-Key``: the business key, so the receiver can collapse retries;
- ``X-Fencing-Token``: the lease's token, so the receiver can refuse a stale holder;
- ``X-Timestamp`` and ``X-Signature: sha256=<hex HMAC-SHA256>`` with
  ``WEBHOOK_SIGNING_SECRET`` (omitted when no secret is configured) of
  ``"<timestamp>.<idempotency key>.<fencing token>.<body>"``: the headers the receiver acts
  on are signed with the body, so none can be swapped or replayed with another's.

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


def sign(body: bytes, timestamp: str, secret: str, *, idempotency_key: str, token: int) -> str:
    """Return the ``X-Signature`` value for ``body`` sent at ``timestamp`` with these headers."""
    message = f"{timestamp}.{idempotency_key}.{token}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


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
    """Check a received webhook: the signature matches and the timestamp is recent."""
    try:
        age = abs(time.time() - int(timestamp))
        token = int(token)
    except (TypeError, ValueError):
        return False
    if age > tolerance or not secret:
        return False
    expected = sign(body, timestamp, secret, idempotency_key=idempotency_key, token=token)
    return hmac.compare_digest(expected.encode(), (signature or "").encode())


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
    body = json.dumps(payload, cls=DjangoJSONEncoder, sort_keys=True).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": idempotency_key,
        "X-Fencing-Token": str(token),
        TIMESTAMP_HEADER: timestamp,
    }
    if settings.WEBHOOK_SIGNING_SECRET:
        headers[SIGNATURE_HEADER] = sign(
            body,
            timestamp,
            settings.WEBHOOK_SIGNING_SECRET,
            idempotency_key=idempotency_key,
            token=token,
        )
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
