"""Signed webhooks: what the platform sends verifies; anything changed, replayed late or
unsigned does not; and the receiver example of docs/security.md (locking's receiver), run
against real calls, refuses a stale fencing token and does each idempotency key's work once."""

import hashlib
import hmac
import json
import re
import time

import pytest
from django.test import RequestFactory

from charges.services import generate_monthly_charges
from hoa.integrations.webhooks import ExternalCallFailed, post_fenced
from locking import FencingToken
from locking.models import ReceivedCall
from locking.receiving import seal_call, verify_signature
from tests.charges_support import MONTH
from tests.harness.http import HttpStub
from tests.harness.processes import BASE_DIR

SECRET = "webhook-secret-for-tests"
KEY = "monthly-charges:7:2026-03"
EXAMPLE_SECRET = '"the same value as the platform\'s WEBHOOK_SIGNING_SECRET"'


def receiver_example() -> dict:
    """Run the receiver code block of docs/security.md with our secret; return its names."""
    docs = (BASE_DIR / "docs" / "security.md").read_text()
    [code] = re.findall(r"```python\n(# Receiver example.*?)```", docs, re.DOTALL)
    assert EXAMPLE_SECRET in code
    code = code.replace(EXAMPLE_SECRET, repr(SECRET))
    namespace: dict = {}
    exec(compile(code, "docs/security.md", "exec"), namespace)  # noqa: S102 - our own docs
    return namespace


@pytest.fixture
def signed_calls(settings):
    """A stand-in that only records what the platform sends (the wire format's tests)."""
    settings.WEBHOOK_SIGNING_SECRET = SECRET
    stub = HttpStub(receiver=False).start()
    yield stub
    stub.stop()


def grant(token: int) -> FencingToken:
    """The fencing token of a grant on the run's resource (each number its own grant)."""
    return FencingToken("monthly-charges:org:7:2026-03", token, f"grant-{token}")


def signed(payload: dict, *, key=KEY, token=5, at=None, secret=SECRET, endpoint="billing"):
    """A call as the platform makes it: the body and its headers."""
    call = seal_call(
        payload,
        idempotency_key=key,
        token=grant(token),
        secret=secret,
        endpoint=endpoint,
        sent_at=at,
    )
    return call.body, call.headers


def check(body: bytes, headers: dict[str, str], secret=SECRET, endpoint="billing") -> bool:
    return verify_signature(
        body,
        headers.get("X-Timestamp", ""),
        headers.get("X-Signature", ""),
        secret,
        idempotency_key=headers.get("Idempotency-Key", ""),
        token=headers.get("X-Fencing-Token", ""),
        endpoint=endpoint,
    )


def post(url: str, payload: dict, token: int = 5, endpoint: str = "billing"):
    return post_fenced(url, payload, idempotency_key=KEY, token=grant(token), endpoint=endpoint)


def test_a_call_the_platform_sends_verifies_with_the_shared_secret(signed_calls):
    post(signed_calls.url_for("billing"), {"total": "10.00"})

    [call] = signed_calls.received
    # The contract: X-Signature is sha256=<hex HMAC-SHA256 of the body>, nothing else.
    digest = hmac.new(SECRET.encode(), call.body, hashlib.sha256).hexdigest()
    assert call.headers["X-Signature"] == f"sha256={digest}"
    # The body carries signed copies of the headers the receiver acts on.
    assert call.json == {
        "total": "10.00",
        "idempotency_key": KEY,
        "fencing_token": 5,
        "sent_at": int(call.headers["X-Timestamp"]),
        "endpoint": "billing",
    }
    assert check(call.body, call.headers)
    assert not check(call.body, call.headers, secret="another secret")
    # Sealed for billing: another endpoint that shares the secret does not take it.
    assert not check(call.body, call.headers, endpoint="refunds")


def test_a_payload_may_not_shadow_the_signed_fields(signed_calls):
    with pytest.raises(ValueError, match="fencing_token"):
        post(signed_calls.url_for("billing"), {"fencing_token": 99})
    with pytest.raises(ValueError, match="endpoint"):
        post(signed_calls.url_for("billing"), {"x": 1}, endpoint="")
    assert signed_calls.received == []


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda body, h: (body.replace(b"10.00", b"99.00"), h), id="body"),
        pytest.param(lambda body, h: (body + b" ", h), id="trailing byte"),
        pytest.param(lambda body, h: (body, {**h, "X-Fencing-Token": "6"}), id="token"),
        pytest.param(
            lambda body, h: (body, {**h, "Idempotency-Key": "monthly-charges:8:2026-03"}),
            id="idempotency key",
        ),
        pytest.param(
            lambda body, h: (body, {**h, "X-Timestamp": str(int(h["X-Timestamp"]) + 1)}),
            id="timestamp",
        ),
        pytest.param(lambda body, h: (body, {**h, "X-Signature": ""}), id="no signature"),
        pytest.param(
            lambda body, h: (body, {**h, "X-Signature": h["X-Signature"].upper()}),
            id="signature case",
        ),
        pytest.param(lambda body, h: (body, {**h, "X-Timestamp": "soon"}), id="bad timestamp"),
        pytest.param(lambda body, h: (body, {**h, "X-Signature": "sha256=é"}), id="non-ascii"),
    ],
)
def test_anything_changed_in_a_signed_call_fails_verification(signed_calls, tamper):
    post(signed_calls.url_for("billing"), {"total": "10.00"})
    [call] = signed_calls.received

    body, headers = tamper(call.body, call.headers)

    assert not check(body, headers)


def test_a_signature_older_or_newer_than_five_minutes_fails():
    payload = {"total": "10.00"}

    assert check(*signed(payload, at=time.time() - 290))
    assert not check(*signed(payload, at=time.time() - 301))
    assert not check(*signed(payload, at=time.time() + 301))


def test_headers_that_disagree_with_the_signed_body_fail():
    body, headers = signed({"total": "10.00"}, token=5)
    # Re-signing is impossible without the secret, so an attacker can only swap headers.
    assert not check(body, {**headers, "X-Fencing-Token": "6"})
    assert not check(body, {**headers, "Idempotency-Key": "monthly-charges:8:2026-03"})
    assert not check(body, {**headers, "X-Timestamp": str(int(headers["X-Timestamp"]) - 1)})
    # A correctly signed body that is not a JSON object carrying them fails too.
    bare = b'{"total": "10.00"}'
    signature = "sha256=" + hmac.new(SECRET.encode(), bare, hashlib.sha256).hexdigest()
    assert not check(bare, {**headers, "X-Signature": signature})


def test_without_a_secret_calls_are_unsigned_and_a_receiver_refuses_them(settings, http_stub):
    settings.WEBHOOK_SIGNING_SECRET = ""
    with pytest.raises(ExternalCallFailed, match="HTTP 401"):
        post(http_stub.url_for("billing"), {"total": "10.00"})

    [call] = http_stub.received
    assert "X-Signature" not in call.headers
    assert (call.status, call.verdict) == (401, "unverified")
    assert not verify_signature(
        call.body, call.headers["X-Timestamp"], "", "", idempotency_key=KEY, token=5,
        endpoint="billing",
    )  # fmt: skip


def facts(answer) -> dict:
    """The refusal's facts, without what names the call it answers (checked elsewhere)."""
    return {name: answer[1][name] for name in ("token", "accepted")}


def send(view, body: bytes, headers: dict[str, str]):
    """POST a call to a receiving view; return (status, JSON answer, the receiver's verdict)."""
    request = RequestFactory().post(
        "/billing", data=body, content_type="application/json", headers=headers
    )
    response = view(request)
    return response.status_code, json.loads(response.content), request.fenced_receipt.verdict


@pytest.mark.django_db
def test_receiver_example_refuses_a_stale_token_and_does_each_key_once():
    view = receiver_example()["billing_webhook"]
    payload = {"total": "10.00", "charge_count": 10}

    def call(token, *, content=payload, at=None):
        return send(view, *signed(content, token=token, at=at))

    first = call(5)
    replay = call(5, at=time.time() + 2)  # the same call, signed again: answered as before
    newer = call(7)  # a newer holder of the same run: replaces the first
    stale = call(6)  # the holder that lost its lease, arriving late
    reused = call(7, content={**payload, "total": "99.00"})  # token 7 with other content
    body, headers = signed(payload, token=9)
    forged = send(view, body, {**headers, "X-Fencing-Token": "10"})

    assert first == (200, {"accepted": 5, "charges": 10}, "accepted")
    assert replay == (200, {"accepted": 5, "charges": 10}, "replayed")
    assert newer == (200, {"accepted": 7, "charges": 10}, "replaced")
    assert stale[::2] == (409, "stale") and facts(stale) == {"token": 6, "accepted": 7}
    assert reused[::2] == (422, "conflict") and facts(reused) == {"token": 7, "accepted": 7}
    assert forged == (401, {"refused": "unverified"}, "unverified")
    [record] = ReceivedCall.objects.filter(scope="billing")
    assert (record.idempotency_key, record.token, record.replaced_token) == (KEY, 7, 5)
    assert (record.replacements, record.payload["total"]) == (1, "10.00")


@pytest.mark.django_db
def test_receiver_example_fences_dispatch_calls_per_complaint():
    example = receiver_example()
    view = example["billing_webhook"]
    by_first = "vendor-assignment:42:3:replacing:none"
    by_second = "vendor-assignment:42:4:replacing:17"
    payload = {"charge_count": 0}

    newer = send(view, *signed(payload, key=by_second, token=8))
    # Another vendor for the same complaint, under an older lease: refused.
    older = send(view, *signed(payload, key=by_first, token=7))

    assert newer[0] == 200
    assert older[::2] == (409, "stale") and facts(older) == {"token": 7, "accepted": 8}
    assert example["fenced_resource"](by_first) == "vendor-assignment:42"
    assert example["fenced_resource"](KEY) is None
    assert list(ReceivedCall.objects.values_list("idempotency_key", "token")) == [(by_second, 8)]


@pytest.mark.django_db(transaction=True)
def test_a_real_charge_run_call_is_accepted_by_the_receiver_example(
    settings, signed_calls, maple, alice
):
    settings.WEBHOOK_SIGNING_SECRET = settings.LOCK_RECEIVER_SECRET = SECRET
    settings.BILLING_WEBHOOK_URL = signed_calls.url_for("billing")  # it only records
    view = receiver_example()["billing_webhook"]

    result = generate_monthly_charges(organization=maple, month=MONTH, actor=alice)

    [call] = signed_calls.received
    status, answer, verdict = send(view, call.body, call.headers)
    assert (status, answer, verdict) == (200, {"accepted": result.token, "charges": 10}, "accepted")
    key = f"monthly-charges:{maple.pk}:2026-03"
    assert list(ReceivedCall.objects.values_list("scope", "idempotency_key", "token")) == [
        ("billing", key, result.token),
    ]
