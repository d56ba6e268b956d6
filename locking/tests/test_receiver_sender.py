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

from locking import (
    Attempt,
    StaleAtReceiver,
    StaleFencingToken,
    advance_fence,
    fence_key,
    lock_key,
    receive_call,
    run_fenced,
    seal_call,
)
from locking.epochs import first_token
from locking.models import FenceEvent, ReceivedCall
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


def post(key: str, token: int) -> None:
    """The sender's client: one sealed call; a 409 raises ``StaleAtReceiver``."""
    call = seal_call({"total": "10.00"}, idempotency_key=key, token=token, secret=SECRET)
    receipt = receive_call(call.headers, call.body, lambda c: _ok(), scope="billing", secret=SECRET)
    if receipt.response.status_code == 409:
        raise StaleAtReceiver.from_answer(token, receipt.response.content, url=URL)
    assert receipt.response.status_code == 200, receipt.response.content


def _ok():
    from django.http import JsonResponse

    return JsonResponse({"ok": True})


def billed_then_written(thing: FencedThing, key: str, calls: list[int]):
    def work(lease) -> int:
        calls.append(lease.token)
        post(key, lease.token)
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
        return lease.token

    return work


def events(resource: str) -> list[tuple]:
    rows = FenceEvent.objects.for_resource(resource).order_by("id")
    return list(rows.values_list("outcome", "token", "detail"))


def test_from_answer_reads_the_accepted_token_and_tolerates_a_receiver_that_says_nothing():
    stated = StaleAtReceiver.from_answer(3, b'{"refused": "stale", "token": 3, "accepted": 9}')
    silent = StaleAtReceiver.from_answer(3, b"<html>Conflict</html>")

    assert isinstance(stated, StaleFencingToken)
    assert (stated.token, stated.accepted, stated.recorded) == (3, 9, 9)
    assert str(stated) == "fencing token 3 is stale: the receiver had already accepted token 9"
    assert (silent.accepted, silent.recorded, silent.epoch) == (None, None, None)
    assert "accepted a higher token" in str(silent)


def test_a_receivers_refusal_is_recorded_as_stale_naming_the_receiver_and_nothing_is_written(
    thing, resource, fence_lock, redis_client
):
    key = "bill:march"
    calls: list[int] = []

    def overtaken(lease) -> int:
        calls.append(lease.token)
        redis_client.delete(lock_key(resource))  # paused past its lease...
        with fence_lock.acquire(resource, ttl=TTL) as rival:
            post(key, rival.token)  # ...while a newer holder's call got there first
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
    post(key, 40)
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
