"""Signed webhooks: what the platform sends verifies; anything changed, replayed late or
unsigned does not; and the receiver example of docs/security.md, run against real calls,
refuses a stale fencing token and does each idempotency key's work once."""

import json
import re
import time

import pytest

from charges.services import generate_monthly_charges
from hoa.outbound import post_fenced, sign, verify
from tests.charges_support import MONTH
from tests.conftest import BASE_DIR

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


def signed(body: bytes, *, key=KEY, token=5, at=None, secret=SECRET) -> dict[str, str]:
    timestamp = str(int(time.time() if at is None else at))
    return {
        "Idempotency-Key": key,
        "X-Fencing-Token": str(token),
        "X-Timestamp": timestamp,
        "X-Signature": sign(body, timestamp, secret, idempotency_key=key, token=token),
    }


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
    assert call.headers["X-Signature"].startswith("sha256=")
    assert check(call.body, call.headers)
    assert not check(call.body, call.headers, secret="another secret")


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
    body = b'{"total": "10.00"}'

    assert check(body, signed(body, at=time.time() - 290))
    assert not check(body, signed(body, at=time.time() - 301))
    assert not check(body, signed(body, at=time.time() + 301))


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
    body = json.dumps({"total": "10.00"}).encode()

    first = receive(signed(body, token=5), body)
    retry = receive(signed(body, token=5), body)  # the same holder retrying
    newer = receive(signed(body, token=7), body)  # a newer holder, same run: already done
    stale = receive(signed(body, token=6), body)  # the holder that lost its lease
    forged = receive({**signed(body, token=9), "X-Fencing-Token": "10"}, body)

    assert first == retry == newer == (200, {"accepted": {"total": "10.00"}})
    assert stale == (409, {"error": "stale fencing token", "highest": 7})
    assert forged[0] == 401
    assert receiver["highest_token"] == {KEY: 7}


def test_receiver_example_fences_dispatch_calls_per_complaint():
    receiver = receiver_example()
    body = b"{}"
    by_first = "vendor-assignment:42:3:replacing:none"
    by_second = "vendor-assignment:42:4:replacing:17"

    assert receiver["receive"](signed(body, key=by_second, token=8), body)[0] == 200
    # Another vendor for the same complaint, under an older lease: refused.
    assert receiver["receive"](signed(body, key=by_first, token=7), body)[0] == 409
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
