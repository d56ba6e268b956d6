"""The receiving side (``receive_call``, ``fenced_receiver``): per key the highest token
accepted, a higher one replacing it, a lower one refused with 409, a replay answered as the
first time, a reused token refused with 422, unsigned calls refused with 401; decided by
one conditional statement, in the same transaction as the handler's writes."""

import json
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse, JsonResponse
from django.test import Client, RequestFactory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from locking import FencingToken
from locking.models import ReceivedCall, ReceivedFence
from locking.receiving import CallVerdict, receive_call, seal_call
from locking.receiving.signing import open_answer
from locking.testing import ReceiverClient
from locking.tests.testapp.models import FencedThing
from locking.tests.urls import RECEIVER_SECRET as SECRET
from locking.tests.urls import billing_view

KEY = "monthly-charges:7:2026-03"
PAYLOAD = {"total": "10.00", "lines": [{"unit": "M001", "amount": "10.00"}]}

pytestmark = pytest.mark.django_db


class Handler:
    """A receiving service's work: remembers each call it was given, answers its token."""

    def __init__(self, status: int = 200):
        self.calls = []
        self.status = status

    def __call__(self, call) -> HttpResponse:
        self.calls.append(call)
        return JsonResponse({"accepted": call.token, "n": len(self.calls)}, status=self.status)


def sealed(
    token: int, *, key: str = KEY, payload=PAYLOAD, secret=SECRET, at=None, endpoint="billing"
):
    return seal(token, key=key, payload=payload, secret=secret, at=at, endpoint=endpoint)[::-1]


def seal(token: int, *, key=KEY, payload=PAYLOAD, secret=SECRET, at=None, endpoint="billing"):
    """A sender's call under a grant of ``token`` (each number its own grant)."""
    grant = FencingToken("monthly-charges:org:7:2026-03", token, f"grant-{token}")
    call = seal_call(
        payload, idempotency_key=key, token=grant, secret=secret, sent_at=at, endpoint=endpoint
    )
    return call.body, call.headers


def receive(token: int, handler=None, *, scope="billing", **options):
    headers, body = sealed(
        token,
        endpoint=scope,
        **{k: options.pop(k) for k in ("key", "payload", "at") if k in options},
    )
    return receive_call(headers, body, handler or Handler(), scope=scope, secret=SECRET, **options)


# What a refusal adds to name the call it answers (the test of signed answers reads them).
NAMING = ("idempotency_key", "endpoint", "sent_at")


def answer(receipt) -> tuple[int, dict, str]:
    facts = json.loads(receipt.response.content)
    facts = {name: value for name, value in facts.items() if name not in NAMING}
    return receipt.response.status_code, facts, receipt.verdict


def record(key: str = KEY, scope: str = "billing") -> tuple:
    row = ReceivedCall.objects.get(scope=scope, idempotency_key=key)
    return row.token, row.replaced_token, row.replacements, row.payload["total"]


# -- one call at a time ------------------------------------------------------------------------


def test_the_first_call_of_a_key_is_accepted_and_its_answer_kept():
    handler = Handler()

    receipt = receive(5, handler)

    assert answer(receipt) == (200, {"accepted": 5, "n": 1}, CallVerdict.ACCEPTED)
    [call] = handler.calls
    assert (call.idempotency_key, call.token, call.replaces) == (KEY, 5, None)
    assert call.payload == PAYLOAD  # the signed fields are not part of it
    assert record() == (5, None, 0, "10.00")
    row = ReceivedCall.objects.get()
    assert (row.answer_status, bytes(row.answer_body)) == (200, b'{"accepted": 5, "n": 1}')


def test_a_higher_token_replaces_the_call_of_its_key_and_the_handler_learns_which():
    handler = Handler()
    receive(5, handler)

    receipt = receive(7, handler, payload={**PAYLOAD, "total": "12.00"})

    assert answer(receipt) == (200, {"accepted": 7, "n": 2}, CallVerdict.REPLACED)
    assert handler.calls[-1].replaces == 5
    assert record() == (7, 5, 1, "12.00")  # one record per key: replaced, not added
    assert ReceivedCall.objects.count() == 1


def test_a_lower_token_is_refused_with_409_naming_the_accepted_one_and_nothing_runs():
    handler = Handler()
    receive(7, handler)

    receipt = receive(6, handler)

    assert answer(receipt) == (409, {"refused": "stale", "token": 6, "accepted": 7}, "stale")
    assert receipt.accepted == 7
    assert len(handler.calls) == 1
    assert record() == (7, None, 0, "10.00")


def test_the_same_token_and_content_signed_again_is_answered_as_the_first_time():
    handler = Handler()
    first = receive(5, handler)

    again = receive(5, handler, at=time.time() + 3)  # a resend: another signing time

    assert answer(again) == (200, {"accepted": 5, "n": 1}, CallVerdict.REPLAYED)
    assert again.response.content == first.response.content
    assert len(handler.calls) == 1
    assert record() == (5, None, 0, "10.00")


def test_the_same_token_with_other_content_is_refused_with_422():
    handler = Handler()
    receive(5, handler)

    receipt = receive(5, handler, payload={**PAYLOAD, "total": "99.00"})

    assert answer(receipt) == (422, {"refused": "conflict", "token": 5, "accepted": 5}, "conflict")
    assert len(handler.calls) == 1
    assert record() == (5, None, 0, "10.00")


def test_keys_and_scopes_are_fenced_apart():
    receive(9, key="monthly-charges:7:2026-04")
    receive(9, scope="another-endpoint")

    assert receive(3).verdict == CallVerdict.ACCEPTED  # its own key, its own scope
    assert ReceivedCall.objects.count() == 3


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda h, b: (h, b.replace(b"10.00", b"11.00")), id="body"),
        pytest.param(lambda h, b: ({**h, "X-Fencing-Token": "6"}, b), id="token header"),
        pytest.param(lambda h, b: ({**h, "Idempotency-Key": "other"}, b), id="key header"),
        pytest.param(
            lambda h, b: ({k: v for k, v in h.items() if k != "X-Signature"}, b), id="unsigned"
        ),
    ],
)
def test_a_call_that_does_not_verify_is_refused_with_401_and_touches_nothing(
    tamper, django_assert_num_queries
):
    headers, body = tamper(*sealed(5))
    handler = Handler()

    with django_assert_num_queries(0):
        receipt = receive_call(headers, body, handler, scope="billing", secret=SECRET)

    assert answer(receipt) == (401, {"refused": "unverified"}, "unverified")
    assert handler.calls == []


def test_header_names_are_matched_without_regard_to_case():
    headers, body = sealed(5, endpoint="b")
    lower = {name.lower(): value for name, value in headers.items()}
    assert receive_call(lower, body, Handler(), scope="b", secret=SECRET).verdict == "accepted"


def test_calls_signed_with_another_secret_or_too_long_ago_are_refused():
    headers, body = sealed(5, secret="another secret", endpoint="b")
    assert receive_call(headers, body, Handler(), scope="b", secret=SECRET).verdict == "unverified"
    headers, body = sealed(5, at=time.time() - 301, endpoint="b")
    assert receive_call(headers, body, Handler(), scope="b", secret=SECRET).verdict == "unverified"
    assert not ReceivedCall.objects.exists()


def test_without_a_secret_the_receiver_refuses_to_run(settings):
    settings.LOCK_RECEIVER_SECRET = ""
    headers, body = sealed(5)
    with pytest.raises(ImproperlyConfigured, match="LOCK_RECEIVER_SECRET"):
        receive_call(headers, body, Handler(), scope="billing")
    settings.LOCK_RECEIVER_SECRET = SECRET  # the setting is the default secret
    assert receive_call(headers, body, Handler(), scope="billing").verdict == "accepted"


def test_a_handler_that_declines_keeps_nothing_and_its_writes_roll_back():
    def declining(call):
        FencedThing.objects.create(name=f"written for {call.token}")
        return JsonResponse({"error": "unknown unit"}, status=400)

    receipt = receive(5, declining)

    assert answer(receipt) == (400, {"error": "unknown unit"}, CallVerdict.DECLINED)
    assert not ReceivedCall.objects.exists()
    assert not FencedThing.objects.exists()
    assert receive(5).verdict == CallVerdict.ACCEPTED  # the same call may come again


def test_the_handlers_writes_commit_with_the_record_or_not_at_all():
    def failing(call):
        FencedThing.objects.create(name="half")
        raise RuntimeError("the receiving service's bug")

    with pytest.raises(RuntimeError):
        receive(5, failing)
    assert not ReceivedCall.objects.exists()
    assert not FencedThing.objects.exists()


def test_a_call_sealed_for_another_endpoint_is_refused_even_with_the_shared_secret():
    """Issue 35, point 9: the refunds endpoint ran the handler of a call sealed for billing
    (both share LOCK_RECEIVER_SECRET; the seal named no endpoint)."""
    handler = Handler()
    headers, body = sealed(5, endpoint="billing")

    receipt = receive_call(headers, body, handler, scope="refunds", secret=SECRET)

    assert answer(receipt) == (401, {"refused": "unverified"}, "unverified")
    assert handler.calls == []
    assert not ReceivedCall.objects.exists()


def test_a_refusal_is_signed_and_names_the_call_it_answers():
    """Issue 35, point 6: what a 409 says was accepted counts only when the receiver signed
    it for this very call; a forged, unsigned or another call's answer says nothing."""
    receive(7)
    body, headers = seal(6)
    receipt = receive_call(headers, body, Handler(), scope="billing", secret=SECRET)
    refusal = receipt.response
    sent = seal_call(
        PAYLOAD,
        idempotency_key=KEY,
        token=FencingToken("monthly-charges:org:7:2026-03", 6, "grant-6"),
        secret=SECRET,
        endpoint="billing",
    )

    facts = open_answer(refusal.headers, refusal.content, sent=sent, secret=SECRET)

    assert facts["accepted"] == 7 and facts["token"] == 6 and facts["endpoint"] == "billing"
    assert open_answer(refusal.headers, refusal.content, sent=sent, secret="other") is None
    forged = refusal.content.replace(b'"accepted": 7', b'"accepted": 4611686018427387904')
    assert open_answer(refusal.headers, forged, sent=sent, secret=SECRET) is None
    _, another_call = seal(8)
    another = type(sent)(seal(8)[0], another_call)
    assert open_answer(refusal.headers, refusal.content, sent=another, secret=SECRET) is None


# -- the resource fence --------------------------------------------------------------------------


def per_complaint(key: str) -> str | None:
    kind, _, rest = key.partition(":")
    return f"{kind}:{rest.partition(':')[0]}" if kind == "vendor-assignment" else None


def test_with_a_resource_a_lower_token_of_another_key_of_it_is_refused():
    first = "vendor-assignment:42:3:replacing:none"
    second = "vendor-assignment:42:4:replacing:none"
    elsewhere = "vendor-assignment:43:3:replacing:none"

    newer = receive(8, key=second, resource=per_complaint)
    older = receive(7, key=first, resource=per_complaint)
    same_grant = receive(8, key=first, resource=per_complaint)  # one grant's other call
    other_complaint = receive(2, key=elsewhere, resource=per_complaint)

    assert newer.verdict == same_grant.verdict == other_complaint.verdict == "accepted"
    assert answer(older) == (409, {"refused": "stale", "token": 7, "accepted": 8}, "stale")
    assert sorted(ReceivedFence.objects.values_list("resource", "token")) == [
        ("vendor-assignment:42", 8),
        ("vendor-assignment:43", 2),
    ]
    assert sorted(ReceivedCall.objects.values_list("idempotency_key", "token")) == [
        (first, 8),
        (second, 8),
        (elsewhere, 2),
    ]


# -- any order -----------------------------------------------------------------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tokens=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=8))
def test_whatever_order_calls_arrive_in_the_record_holds_the_highest_and_lower_ones_are_refused(
    tokens,
):
    key = f"monthly-charges:7:{time.monotonic_ns()}"  # every example its own key
    verdicts = [receive(token, key=key).verdict for token in tokens]

    highest = 0
    for token, verdict in zip(tokens, verdicts, strict=True):
        expected = (
            "stale"
            if token < highest
            else "replayed"
            if token == highest
            else "accepted"
            if highest == 0
            else "replaced"
        )
        assert verdict == expected, (tokens, verdicts)
        highest = max(highest, token)
    assert ReceivedCall.objects.get(idempotency_key=key).token == max(tokens)


# -- the view decorator ---------------------------------------------------------------------------


def test_fenced_receiver_wraps_a_view_post_only_and_exempt_from_csrf():
    factory = RequestFactory()
    headers, body = sealed(5, endpoint="billing-view")
    request = factory.post("/b", data=body, content_type="application/json", headers=headers)
    request._dont_enforce_csrf_checks = False

    response = billing_view(request)

    assert (response.status_code, json.loads(response.content)) == (
        200,
        {"accepted": 5, "replaces": None},
    )
    assert request.fenced_receipt.verdict == CallVerdict.ACCEPTED
    assert billing_view.csrf_exempt is True
    assert billing_view(factory.get("/b")).status_code == 405
    late_headers, late_body = sealed(4, endpoint="billing-view")
    stale = factory.post(
        "/b", data=late_body, content_type="application/json", headers=late_headers
    )
    assert billing_view(stale).status_code == 409


def test_fenced_receiver_is_reached_through_the_csrf_middleware(settings):
    settings.ROOT_URLCONF = "locking.tests.urls"
    client = ReceiverClient(Client(enforce_csrf_checks=True), secret=SECRET)
    grant = FencingToken("monthly-charges:org:7:2026-03", 5, "grant-5")

    delivery = client.post("/receiver/billing/", PAYLOAD, token=grant, idempotency_key=KEY)

    assert (delivery.status, delivery.verdict) == (200, CallVerdict.ACCEPTED)
    assert delivery.answer == {"accepted": 5, "replaces": None}
