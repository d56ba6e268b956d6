"""The sender's side of a receiver's refusal: a 409 from the receiver is a stale holder, not a
failed call. ``run_fenced`` records it as ``stale`` naming the receiver, and when the Redis
counter is below the token the receiver had accepted (a counter behind), starts a new
epoch above it and tries once more.

The work seals its call and hands it to a real receiver (``receive_call``, its records in
the test database); only the HTTP hop between them is left out.
"""

from datetime import timedelta

import pytest
from django.db import transaction

from locking import FencingToken, StaleFencingToken, advance_fence, run_fenced
from locking.audit import Attempt
from locking.epochs import current_epoch, first_token
from locking.keys import fence_key, lock_key
from locking.models import FenceEpoch, FenceEvent, ReceivedCall
from locking.receiving import StaleAtReceiver, receive_call, seal_call
from locking.tests.testapp.models import FencedThing

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "receiver-sender-secret"
URL = "http://billing.test/hook"
TTL = timedelta(seconds=30)
ALICE = Attempt(actor="alice", operation="bill")


@pytest.fixture
def thing():
    return FencedThing.objects.create(name="March charges")


@pytest.fixture
def resource(thing):
    return f"fenced-thing:{thing.pk}"


def post(key: str, token, *, answer=None) -> None:
    """The sender's client: one sealed call (``token``: the lease, or a ``FencingToken``); a
    409 raises ``StaleAtReceiver``. ``answer(response)`` may stand in for what the network
    brings back."""
    call = seal_call(
        {"total": "10.00"}, idempotency_key=key, token=token, secret=SECRET, endpoint="billing"
    )
    receipt = receive_call(call.headers, call.body, lambda c: _ok(), scope="billing", secret=SECRET)
    response = answer(receipt.response) if answer is not None else receipt.response
    if response.status_code == 409:
        raise StaleAtReceiver.from_answer(
            token, response.content, headers=response.headers, sent=call, secret=SECRET, url=URL
        )
    assert response.status_code == 200, response.content


def _ok():
    from django.http import JsonResponse

    return JsonResponse({"ok": True})


def billed_then_written(thing: FencedThing, key: str, calls: list[int], answer=None):
    def work(lease) -> int:
        calls.append(lease.token)
        post(key, lease, answer=answer)
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
        return lease.token

    return work


def events(resource: str) -> list[tuple]:
    rows = FenceEvent.objects.for_resource(resource).order_by("id")
    return list(rows.values_list("outcome", "token", "detail"))


def grant(token: int, resource: str = "fenced-thing:sender") -> FencingToken:
    return FencingToken(resource, token, f"grant-{token}")


def test_from_answer_reads_a_signed_accepted_token_and_nothing_from_an_unsigned_answer():
    post("bill:april", grant(9))
    with pytest.raises(StaleAtReceiver) as stated:
        post("bill:april", grant(3))
    with pytest.raises(StaleAtReceiver) as silent:
        post("bill:april", grant(3), answer=lambda r: _answer(409, b"<html>Conflict</html>"))
    unsigned = b'{"refused": "stale", "token": 3, "accepted": 9}'
    with pytest.raises(StaleAtReceiver) as forged:
        post("bill:april", grant(3), answer=lambda r: _answer(409, unsigned))

    assert isinstance(stated.value, StaleFencingToken)
    assert (stated.value.token, stated.value.accepted, stated.value.recorded) == (3, 9, 9)
    assert str(stated.value) == (
        "fencing token 3 is stale: the receiver had already accepted token 9"
    )
    for said_nothing in (silent.value, forged.value):
        assert (said_nothing.accepted, said_nothing.recorded, said_nothing.epoch) == (
            None,
            None,
            None,
        )
        assert "accepted a higher token" in str(said_nothing)
    with pytest.raises(TypeError, match="takes the lease"):
        StaleAtReceiver.from_answer(3, unsigned, headers={}, sent=None, secret=SECRET)


def _answer(status: int, content: bytes):
    from django.http import HttpResponse

    return HttpResponse(content, status=status, content_type="application/json")


def test_an_unsigned_409_claiming_a_huge_accepted_token_exhausts_no_epochs(
    thing, resource, redis_client
):
    """Issue 35, point 6: anyone on the HTTP path could answer 409 with "accepted":
    4611686018427387904; run_fenced took the counter for behind and recorded an epoch near
    the maximum, after which every honest grant failed with "fence epochs exhausted"."""
    huge = b'{"refused": "stale", "token": 1, "accepted": 4611686018427387904}'

    with pytest.raises(StaleAtReceiver) as refused:
        run_fenced(
            resource,
            billed_then_written(thing, "bill:march", [], answer=lambda r: _answer(409, huge)),
            ttl=TTL,
            attempt=ALICE,
        )

    assert refused.value.accepted is None
    assert current_epoch(resource) == 0
    assert run_fenced(resource, billed_then_written(thing, "bill:may", []), ttl=TTL, attempt=ALICE)


def test_a_signed_accepted_token_past_the_durable_epoch_is_not_believed(
    thing, resource, redis_client
):
    """A receiver's own number, signed, may still be wrong (its bug, a leaked secret): no
    token of an epoch the resource never had can have been granted, so no epoch follows."""
    post("bill:june", grant(first_token(5) + 1, resource))  # accepted: an epoch never begun

    with pytest.raises(StaleAtReceiver) as refused:
        run_fenced(resource, billed_then_written(thing, "bill:june", []), ttl=TTL, attempt=ALICE)

    assert refused.value.accepted == first_token(5) + 1
    assert FenceEpoch.objects.get(resource=resource).epoch == 0


def test_a_receivers_refusal_is_recorded_as_stale_naming_the_receiver_and_nothing_is_written(
    thing, resource, fence_lock, redis_client
):
    key = "bill:march"
    calls: list[int] = []

    def overtaken(lease) -> int:
        calls.append(lease.token)
        redis_client.delete(lock_key(resource))  # paused past its lease...
        with fence_lock.acquire(resource, ttl=TTL) as rival:
            post(key, rival)  # ...while a newer holder's call got there first
        return billed_then_written(thing, key, [])(lease)

    with pytest.raises(StaleAtReceiver) as refused:
        run_fenced(resource, overtaken, ttl=TTL, attempt=ALICE)

    assert (refused.value.token, refused.value.accepted) == (1, 2)
    assert calls == [1]  # not retried: the counter (2) is not behind what the receiver saw
    assert events(resource) == [
        ("stale", 1, f"{URL}: fencing token 1 is stale: the receiver had already accepted token 2")
    ]
    assert FencedThing.objects.get(pk=thing.pk).last_fence_token == 0
    assert list(ReceivedCall.objects.values_list("token", flat=True)) == [2]


def test_a_receivers_refusal_of_a_counter_behind_starts_an_epoch_above_it_and_retries_once(
    thing, resource, redis_client
):
    """Redis lost grants it had made (a failover without replicas confirming them): its
    counter is at 3 while the receiver accepted token 40. Without recovery every later
    grant would be refused there and never reach the fence that starts a new epoch."""
    key = "bill:march"
    post(key, grant(40, resource))
    redis_client.set(fence_key(resource), 3)
    calls: list[int] = []

    token = run_fenced(resource, billed_then_written(thing, key, calls), ttl=TTL, attempt=ALICE)

    assert calls == [4, first_token(1) + 1]
    assert token == first_token(1) + 1
    assert events(resource) == [
        (
            "stale",
            4,
            "Redis fence counter was behind the recorded token 40: new epoch started, retrying",
        ),
        ("committed", token, ""),
    ]
    assert list(ReceivedCall.objects.values_list("token", "replaced_token")) == [(token, 40)]
