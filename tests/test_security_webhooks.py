"""Signed webhooks: what the platform sends verifies; anything changed, replayed late or
unsigned does not; and the receiver example of docs/security.md, run against real calls,
refuses a stale fencing token and does each idempotency key's work once."""

import hashlib
import hmac
import json
import re
import time

import pytest

from charges.services import generate_monthly_charges
from hoa.integrations.webhooks import post_fenced, sign, verify
from tests.charges_support import MONTH
from tests.harness.processes import BASE_DIR

SECRET = "webhook-secret-for-tests"
KEY = "monthly-charges:7:2026-03"


def receiver_example() -> dict:
    """Run the receiver code block of docs/security.md; return its namespace."""
    docs = (BASE_DIR / "docs" / "security.md").read_text()
    [code] = re.findall(r"```python\n(# Receiver example.*?)```", docs, re.DOTALL)
    namespace: dict = {}
    exec(compile(code, "docs/security.md", "exec"), namespace)  # noqa: S102 - our own docs
    namespace["SECRET"] = SECRET
    return namespace


@pytest.fixture
def signed_calls(settings, http_stub):
    settings.WEBHOOK_SIGNING_SECRET = SECRET
    return http_stub


def signed(payload: dict, *, key=KEY, token=5, at=None, secret=SECRET):
    """A call as the platform makes it: the body and its headers."""
    sent_at = int(time.time() if at is None else at)
    body = json.dumps(
        {**payload, "idempotency_key": key, "fencing_token": token, "sent_at": sent_at},
        sort_keys=True,
    ).encode()
    headers = {
        "Idempotency-Key": key,
        "X-Fencing-Token": str(token),
        "X-Timestamp": str(sent_at),
        "X-Signature": sign(body, secret),
    }
    return body, headers


def check(body: bytes, headers: dict[str, str], secret=SECRET) -> bool:
    return verify(
        body,
        headers.get("X-Timestamp", ""),
        headers.get("X-Signature", ""),
        secret,
        idempotency_key=headers.get("Idempotency-Key", ""),
        token=headers.get("X-Fencing-Token", ""),
    )


def test_a_call_the_platform_sends_verifies_with_the_shared_secret(signed_calls):
    post_fenced(signed_calls.url, {"total": "10.00"}, idempotency_key=KEY, token=5)

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
    }
    assert check(call.body, call.headers)
    assert not check(call.body, call.headers, secret="another secret")


def test_a_payload_may_not_shadow_the_signed_fields(signed_calls):
    with pytest.raises(ValueError, match="fencing_token"):
        post_fenced(signed_calls.url, {"fencing_token": 99}, idempotency_key=KEY, token=5)
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
    post_fenced(signed_calls.url, {"total": "10.00"}, idempotency_key=KEY, token=5)
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
    assert not check(bare, {**headers, "X-Signature": sign(bare, SECRET)})


def test_without_a_secret_calls_are_unsigned_and_a_receiver_refuses_them(settings, http_stub):
    settings.WEBHOOK_SIGNING_SECRET = ""
    post_fenced(http_stub.url, {"total": "10.00"}, idempotency_key=KEY, token=5)

    [call] = http_stub.received
    assert "X-Signature" not in call.headers
    assert receiver_example()["receive"](call.headers, call.body)[0] == 401
    assert not verify(call.body, call.headers["X-Timestamp"], "", "", idempotency_key=KEY, token=5)


def test_receiver_example_refuses_a_stale_token_and_does_each_key_once(signed_calls):
    receiver = receiver_example()
    receive = receiver["receive"]
    payload = {"total": "10.00"}

    def call(**kwargs):
        body, headers = signed(payload, **kwargs)
        return receive(headers, body)

    first = call(token=5)
    retry = call(token=5)  # the same holder retrying
    newer = call(token=7)  # a newer holder, same run: already done
    stale = call(token=6)  # the holder that lost its lease
    body, headers = signed(payload, token=9)
    forged = receive({**headers, "X-Fencing-Token": "10"}, body)

    assert first[0] == retry[0] == newer[0] == 200
    assert first == retry == newer  # the first answer, given again
    assert first[1]["accepted"]["total"] == "10.00"
    assert stale == (409, {"error": "stale fencing token", "highest": 7})
    assert forged[0] == 401
    assert receiver["highest_token"] == {KEY: 7}


def test_receiver_example_fences_dispatch_calls_per_complaint():
    receiver = receiver_example()
    by_first = "vendor-assignment:42:3:replacing:none"
    by_second = "vendor-assignment:42:4:replacing:17"

    body, headers = signed({}, key=by_second, token=8)
    assert receiver["receive"](headers, body)[0] == 200
    # Another vendor for the same complaint, under an older lease: refused.
    body, headers = signed({}, key=by_first, token=7)
    assert receiver["receive"](headers, body)[0] == 409
    assert receiver["fenced_resource"](by_first) == "vendor-assignment:42"


@pytest.mark.django_db(transaction=True)
def test_a_real_charge_run_call_is_accepted_by_the_receiver_example(
    settings, signed_calls, maple, alice
):
    settings.BILLING_WEBHOOK_URL = signed_calls.url
    receiver = receiver_example()

    result = generate_monthly_charges(organization=maple, month=MONTH, actor=alice)

    [call] = signed_calls.received
    status, answer = receiver["receive"](call.headers, call.body)
    assert status == 200
    assert answer["accepted"]["charge_count"] == 10
    assert call.headers["X-Fencing-Token"] == str(result.token)
    assert receiver["highest_token"] == {f"monthly-charges:{maple.pk}:2026-03": result.token}
