"""The signed envelope of a fenced call: what a sender puts on the wire, what a receiver checks.

A call is one POST: ``Idempotency-Key``, ``X-Fencing-Token``, ``X-Timestamp`` and
``X-Signature`` (an HMAC-SHA256 of the body), the body repeating the key, token, time and
``endpoint`` it is for. The sender seals (``seal_call``) and reads answers (``open_answer``);
the receiver verifies (``verify_signature``, ``open_call``) and signs its refusals
(``seal_answer``), so a refusal's facts count only from the receiver that was called.
"""

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.core.serializers.json import DjangoJSONEncoder

from locking.keys import LeaseOrToken, fencing_token_of

KEY_HEADER = "Idempotency-Key"
TOKEN_HEADER = "X-Fencing-Token"  # noqa: S105 - a header name, not a secret
TIMESTAMP_HEADER = "X-Timestamp"
SIGNATURE_HEADER = "X-Signature"

# Fields the body carries besides the payload: the signed copies of the headers, and the
# endpoint the call is for.
SIGNED_FIELDS = ("idempotency_key", "fencing_token", "sent_at", "endpoint")
# How far a call's timestamp may be from the receiver's clock, either way.
DEFAULT_TOLERANCE_SECONDS = 300


@dataclass(frozen=True)
class SealedCall:
    """A call ready to send: its body and its headers."""

    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class FencedCall:
    """A call whose signature verified: what it carries, as the receiver acts on it.

    ``payload`` is the body without its signed fields; ``endpoint`` the receiver it names;
    ``replaces`` is the token of the earlier call of the same key this one supersedes (set
    by the receiver; ``None`` for the key's first call).
    """

    idempotency_key: str
    token: int
    sent_at: int
    payload: dict[str, object]
    endpoint: str
    body: bytes = field(repr=False)
    replaces: int | None = None

    @property
    def content_digest(self) -> str:
        """SHA-256 of what the call says, its signing time left out: two sends of the same
        change under the same token have the same digest, whenever they were signed."""
        content = {key: value for key, value in json.loads(self.body).items() if key != "sent_at"}
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def sign(body: bytes, secret: str) -> str:
    """Return the ``X-Signature`` value for ``body``: ``sha256=`` + hex HMAC-SHA256."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def seal_call(
    payload: Mapping[str, object],
    *,
    idempotency_key: str,
    token: LeaseOrToken,
    secret: str,
    endpoint: str,
    sent_at: int | None = None,
    encoder: type[json.JSONEncoder] = DjangoJSONEncoder,
) -> SealedCall:
    """Return the body and headers of one fenced call carrying ``payload``.

    ``token`` is the lease (or its ``fencing_token``); a bare ``int`` raises ``TypeError``.
    ``endpoint`` names the receiver the call is for (its ``scope``), under the signature.
    ``payload`` may not use the signed field names (``ValueError``). Without a ``secret``
    the call goes unsigned (no ``X-Signature``), and a receiver refuses it.
    """
    number = fencing_token_of(token, taken_by="seal_call").token
    clash = set(SIGNED_FIELDS) & payload.keys()
    if clash:
        raise ValueError(f"payload may not use the signed field names {sorted(clash)}")
    if not isinstance(endpoint, str) or not endpoint:
        raise ValueError("seal_call() needs the endpoint the call is for (its receiver's scope)")
    sent_at = int(time.time()) if sent_at is None else int(sent_at)
    envelope = {
        **payload,
        "idempotency_key": idempotency_key,
        "fencing_token": number,
        "sent_at": sent_at,
        "endpoint": endpoint,
    }
    body = json.dumps(envelope, cls=encoder, sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        KEY_HEADER: idempotency_key,
        TOKEN_HEADER: str(number),
        TIMESTAMP_HEADER: str(sent_at),
    }
    if secret:
        headers[SIGNATURE_HEADER] = sign(body, secret)
    return SealedCall(body, headers)


def verify_signature(
    body: bytes,
    timestamp: str,
    signature: str,
    secret: str,
    *,
    idempotency_key: str,
    token: str | int,
    endpoint: str,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
) -> bool:
    """Check a received call (``token`` as its header says: a number).

    The signature is the body's; the timestamp is recent; the headers the receiver acts on
    (timestamp, idempotency key, fencing token) are the ones the signed body carries; and
    the body names ``endpoint``, this receiver.
    """
    return (
        _signed_envelope(
            body,
            timestamp,
            signature,
            secret,
            idempotency_key=idempotency_key,
            token=token,
            endpoint=endpoint,
            tolerance=tolerance,
        )
        is not None
    )


def open_call(
    headers: Mapping[str, str],
    body: bytes,
    *,
    secret: str,
    endpoint: str,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
) -> FencedCall | None:
    """Return what a received call carries if it verifies (``verify_signature``) for
    ``endpoint``, else ``None``. ``headers`` may be any mapping; names are matched without
    regard to case."""
    named = {name.lower(): value for name, value in headers.items()}
    key = named.get(KEY_HEADER.lower(), "")
    envelope = _signed_envelope(
        body,
        named.get(TIMESTAMP_HEADER.lower(), ""),
        named.get(SIGNATURE_HEADER.lower(), ""),
        secret,
        idempotency_key=key,
        token=named.get(TOKEN_HEADER.lower(), ""),
        endpoint=endpoint,
        tolerance=tolerance,
    )
    if envelope is None:
        return None
    payload = {name: value for name, value in envelope.items() if name not in SIGNED_FIELDS}
    return FencedCall(
        idempotency_key=key,
        token=envelope["fencing_token"],
        sent_at=envelope["sent_at"],
        payload=payload,
        endpoint=endpoint,
        body=bytes(body),
    )


def _signed_envelope(
    body, timestamp, signature, secret, *, idempotency_key, token, endpoint, tolerance
) -> dict | None:
    """The signed body as a dict when every check passes, else ``None``."""
    signed = _signed_json(body, timestamp, signature, secret, tolerance=tolerance)
    if signed is None or not idempotency_key or not endpoint:
        return None
    try:
        token = int(token)
    except (TypeError, ValueError):
        return None
    agrees = (
        signed.get("idempotency_key") == idempotency_key
        and signed.get("fencing_token") == token
        and type(signed.get("fencing_token")) is int
        and signed.get("sent_at") == int(timestamp)
        and signed.get("endpoint") == endpoint
    )
    return signed if agrees else None


def _signed_json(body, timestamp, signature, secret, *, tolerance: int) -> dict | None:
    """``body`` as a JSON object, when ``signature`` is its HMAC under ``secret`` and
    ``timestamp`` is within ``tolerance`` seconds of this clock; else ``None``."""
    try:
        age = abs(time.time() - int(timestamp))
    except (TypeError, ValueError):
        return None
    if age > tolerance or not secret:
        return None
    if not hmac.compare_digest(sign(body, secret).encode(), (signature or "").encode()):
        return None
    try:
        signed = json.loads(body)
    except ValueError:
        return None
    return signed if isinstance(signed, dict) else None


# -- answers ------------------------------------------------------------------------------


def seal_answer(facts: Mapping[str, object], *, call: FencedCall, secret: str) -> SealedCall:
    """Sign a receiver's answer to ``call``: ``facts`` (e.g. ``{"refused": "stale",
    "accepted": 12}``) plus the call's key, token and endpoint, so that the sender can
    tell the answer is to its own call (``open_answer``)."""
    sent_at = int(time.time())
    answer = {
        **facts,
        "idempotency_key": call.idempotency_key,
        "token": call.token,
        "endpoint": call.endpoint,
        "sent_at": sent_at,
    }
    body = json.dumps(answer, sort_keys=True).encode()
    headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: str(sent_at)}
    if secret:
        headers[SIGNATURE_HEADER] = sign(body, secret)
    return SealedCall(body, headers)


def open_answer(
    headers: Mapping[str, str],
    body: bytes,
    *,
    sent: SealedCall,
    secret: str,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
) -> dict[str, object] | None:
    """The facts of a receiver's answer to the call ``sent``, if the answer is signed with
    ``secret``, recent, and names that call (its key, token and endpoint); else ``None``:
    then the answer's status is all the sender may act on."""
    named = {name.lower(): value for name, value in headers.items()}
    answer = _signed_json(
        body,
        named.get(TIMESTAMP_HEADER.lower(), ""),
        named.get(SIGNATURE_HEADER.lower(), ""),
        secret,
        tolerance=tolerance,
    )
    if answer is None:
        return None
    asked = json.loads(sent.body)
    names_the_call = (
        answer.get("idempotency_key") == asked["idempotency_key"]
        and answer.get("token") == asked["fencing_token"]
        and answer.get("endpoint") == asked["endpoint"]
    )
    return answer if names_the_call else None
