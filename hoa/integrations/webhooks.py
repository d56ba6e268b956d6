"""Outbound webhook calls of the billing, dispatch and payment clients, on locking's sender
(``locking.post_fenced``: sealed, one POST within a deadline, done / refused / stale /
unknown; docs/locking/sender.md).

What it adds: the settings (``WEBHOOK_SIGNING_SECRET``, ``EXTERNAL_CALL_TIMEOUT_SECONDS``,
kept within half the lease by ``hoa.W001``), and an empty URL skipping the call (logged).
An unknown outcome is recorded and settled by ``hoa.fenced``; receivers: docs/security.md.
"""

import logging
from dataclasses import dataclass

from django.conf import settings

import locking
from locking.receiving import seal_call
from locking.sending import CallOutcomeUnknown, CallRefused

logger = logging.getLogger(__name__)

# The platform's names for locking's answers, which its callers and tests catch.
ExternalCallFailed = CallRefused
ExternalCallUnknown = CallOutcomeUnknown


@dataclass(frozen=True)
class CallResult:
    skipped: bool
    status: int | None = None
    content: bytes = b""  # the receiver's answer (the payment service's reference)


def post_fenced(
    url: str, payload: dict, *, idempotency_key: str, token, endpoint: str
) -> CallResult:
    """POST ``payload`` once to ``url`` with the fencing headers, sealed for ``endpoint``.

    ``token`` is the lease (or its ``fencing_token``); a bare ``int`` raises ``TypeError``.
    Raise ``StaleAtReceiver``, ``ExternalCallFailed`` or ``ExternalCallUnknown`` as
    ``locking.post_fenced`` does. An empty ``url`` means the integration is not
    configured: the call is skipped (logged), its arguments checked all the same.
    """
    secret = settings.WEBHOOK_SIGNING_SECRET
    if not url:
        seal_call(
            payload, idempotency_key=idempotency_key, token=token, secret=secret, endpoint=endpoint
        )
        logger.info(
            "external call skipped: no URL configured",
            extra={"idempotency_key": idempotency_key, "endpoint": endpoint},
        )
        return CallResult(skipped=True)
    answer = locking.post_fenced(
        url,
        payload,
        lease=token,
        idempotency_key=idempotency_key,
        endpoint=endpoint,
        secret=secret,
        timeout=float(settings.EXTERNAL_CALL_TIMEOUT_SECONDS),
    )
    return CallResult(skipped=False, status=answer.status, content=answer.content)
