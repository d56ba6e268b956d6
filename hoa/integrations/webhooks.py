"""Outbound webhook calls shared by the billing and dispatch clients.

One POST per fenced attempt, sealed by ``locking.seal_call`` (locking/signing.py: the one
implementation of the envelope, shared with locking's receiver), carrying:

- ``Idempotency-Key``: the business key, so the receiver can collapse retries;
- ``X-Fencing-Token``: the lease's token, so the receiver can refuse a stale holder;
- ``X-Timestamp``: when it was sent (seconds since the epoch);
- ``X-Signature: sha256=<hex HMAC-SHA256 of the body>`` keyed with
  ``WEBHOOK_SIGNING_SECRET`` (omitted when no secret is configured).

The body repeats the three values the receiver acts on (``idempotency_key``,
``fencing_token``, ``sent_at``), so the signature over the body covers them too: a captured
call cannot be replayed late or with another key or token, and
``locking.verify_signature`` checks that the headers agree with the signed body.

A receiver that keeps the highest token per key (``locking.fenced_receiver``) answers a
call older than one it accepted with 409: that is not a failed call but a stale holder, so
it raises ``locking.StaleAtReceiver`` (a ``StaleFencingToken``), which the runner answers
as the operation's *superseded* refusal (409 / exit 75, audited ``stale``). Any other
answer outside 2xx is ``ExternalCallFailed``.

See docs/security.md for how a receiver verifies and uses them.
"""

import functools
import logging
from dataclasses import dataclass

import requests
from django.conf import settings

from locking import StaleAtReceiver, seal_call

logger = logging.getLogger(__name__)

# The answer of a receiver that had already accepted a higher token for the key.
STALE_STATUS = 409


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


# One pooled session per process. requests reads the proxy variables, the CA bundle
# variables and ~/.netrc again on every call when a session trusts the environment (about
# 0.5 ms a call here, a month start's 10,000 calls included); this one does not, and each
# call passes what the environment says for its URL, read once per URL (``_environment``).
_session = requests.Session()
_session.trust_env = False


@functools.cache
def _environment(url: str) -> dict:
    """What requests would take from the environment for ``url`` (``proxies``, ``verify``,
    ``auth`` from ~/.netrc), as keyword arguments of a call; read once per URL and process."""
    with requests.Session() as reader:  # trusts the environment, as requests does by default
        found = reader.merge_environment_settings(url, {}, None, None, None)
    return {
        "proxies": found["proxies"],
        "verify": found["verify"],
        "auth": requests.utils.get_netrc_auth(url),
    }


def post_fenced(url: str, payload: dict, *, idempotency_key: str, token: int) -> CallResult:
    """POST ``payload`` once to ``url`` with the fencing headers.

    Raise ``StaleAtReceiver`` when the receiver answers 409 (it had accepted a newer
    holder's call), ``ExternalCallFailed`` when it refuses otherwise, fails or times out.
    An empty ``url`` means the integration is not configured: the call is skipped (logged).
    """
    if not url:
        logger.info(
            "external call skipped: no URL configured",
            extra={"idempotency_key": idempotency_key, "token": token},
        )
        return CallResult(skipped=True)
    call = seal_call(
        payload,
        idempotency_key=idempotency_key,
        token=token,
        secret=settings.WEBHOOK_SIGNING_SECRET,
    )
    try:
        response = _session.post(
            url,
            data=call.body,
            headers=call.headers,
            timeout=settings.EXTERNAL_CALL_TIMEOUT_SECONDS,
            **_environment(url),
        )
    except requests.Timeout as exc:
        raise ExternalCallFailed(url, "timed out") from exc
    except requests.RequestException as exc:
        raise ExternalCallFailed(url, exc.__class__.__name__) from exc
    if response.status_code == STALE_STATUS:
        raise StaleAtReceiver.from_answer(token, response.content, url=url)
    if not 200 <= response.status_code < 300:
        raise ExternalCallFailed(url, f"HTTP {response.status_code}", response.status_code)
    return CallResult(skipped=False, status=response.status_code)
