"""Outbound webhook calls shared by the billing, dispatch and payment clients: the platform's
use of locking's sender (``locking.post_fenced``).

locking seals each call (the ``Idempotency-Key``, ``X-Fencing-Token``, ``X-Timestamp`` and
``X-Signature`` headers, the body that repeats them and names the endpoint), posts it once
within a deadline for the whole call, and says what came of it: done (the answer), refused
(``ExternalCallFailed``: a 4xx, or no connection made; nothing was done), a stale holder
(``locking.StaleAtReceiver``: a fenced receiver had accepted a newer call for the key; the
runner answers it as the operation's *superseded* refusal) or unknown
(``ExternalCallUnknown``: a timeout once connected, a lost connection, a partial answer, a
redirect, a 5xx). Recording an unknown outcome and settling it by the same key is the
platform's (``hoa.fenced``, ``settle_outside_calls``; docs/threat-model.md, "What the
outside was told").

What this module adds: the settings (``WEBHOOK_SIGNING_SECRET`` signs,
``EXTERNAL_CALL_TIMEOUT_SECONDS`` is the whole call's deadline, which check ``hoa.W001``
keeps within half of the lease), and an empty URL meaning the integration is not
configured: the call is skipped (logged). See docs/security.md for how a receiver verifies
a call.
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
