"""Two calls of one key at once: the receiver's conditional statement decides them one after
the other, each against what the other committed, never by a read compared in Python.

A hold point inside the first call's handler keeps its transaction (and the key's row
lock) open; the second call is shown blocked on that lock in ``pg_stat_activity`` before
the first is let go. Real threads, each with its own database connection.
"""

import json
import threading

import pytest
from django.db import connection, connections
from django.http import JsonResponse

from locking import FencingToken
from locking.models import ReceivedCall
from locking.receiving import CallVerdict, receive_call, seal_call
from locking.tests.support import wait_until
from locking.tests.testapp.models import FencedThing

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "receiver-race-secret"
KEY = "monthly-charges:7:2026-03"


class HeldCall(threading.Thread):
    """Receives a call in a thread; its handler writes a row and waits at a hold point."""

    def __init__(self, token: int, *, hold: bool, total: str = "10.00"):
        super().__init__()
        self.token = token
        self.entered = threading.Event()
        self.go = threading.Event()
        if not hold:
            self.go.set()
        self.total = total
        self.receipt = None
        self.error = None

    def handle(self, call):
        FencedThing.objects.create(name=f"charges of token {call.token}")
        self.entered.set()
        assert self.go.wait(30), "the test never let the handler go on"
        return JsonResponse({"accepted": call.token, "replaces": call.replaces})

    def run(self):
        grant = FencingToken("monthly-charges:org:7:2026-03", self.token, f"grant-{self.token}")
        sealed = seal_call(
            {"total": self.total},
            idempotency_key=KEY,
            token=grant,
            secret=SECRET,
            endpoint="billing",
        )
        try:
            self.receipt = receive_call(
                sealed.headers, sealed.body, self.handle, scope="billing", secret=SECRET
            )
        except BaseException as exc:  # re-raised by the test
            self.error = exc
        finally:
            connections.close_all()

    def answer(self):
        self.join(30)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error
        response = self.receipt.response
        facts = json.loads(response.content)
        for naming in ("idempotency_key", "endpoint", "sent_at"):  # a refusal names its call
            facts.pop(naming, None)
        return response.status_code, facts, self.receipt.verdict


def blocked_on_the_key() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND query LIKE %s",
            ["%INSERT INTO locking_receivedcall%"],
        )
        return cursor.fetchone()[0] == 1


def race(first_token: int, second_token: int, *, second_total: str = "10.00"):
    first = HeldCall(first_token, hold=True)
    first.start()
    assert first.entered.wait(30)
    second = HeldCall(second_token, hold=False, total=second_total)
    second.start()
    wait_until(blocked_on_the_key, what="the second call to wait for the key's row lock")
    assert not second.entered.is_set()
    first.go.set()
    return first.answer(), second.answer()


def written() -> list[str]:
    return sorted(FencedThing.objects.values_list("name", flat=True))


def test_a_lower_token_arriving_while_a_higher_one_is_handled_waits_and_is_refused():
    first, second = race(6, 5)

    assert first == (200, {"accepted": 6, "replaces": None}, CallVerdict.ACCEPTED)
    assert second == (409, {"refused": "stale", "token": 5, "accepted": 6}, CallVerdict.STALE)
    assert list(ReceivedCall.objects.values_list("token", "replaced_token")) == [(6, None)]
    assert written() == ["charges of token 6"]


def test_a_higher_token_arriving_while_a_lower_one_is_handled_waits_then_replaces_it():
    first, second = race(5, 6)

    assert first == (200, {"accepted": 5, "replaces": None}, CallVerdict.ACCEPTED)
    assert second == (200, {"accepted": 6, "replaces": 5}, CallVerdict.REPLACED)
    assert list(ReceivedCall.objects.values_list("token", "replaced_token")) == [(6, 5)]
    # Each handler wrote once; the receiving service replaces token 5's record with 6's.
    assert written() == ["charges of token 5", "charges of token 6"]


def test_the_same_call_twice_at_once_runs_the_handler_once_and_answers_both_alike():
    first, second = race(5, 5)

    assert first == (200, {"accepted": 5, "replaces": None}, CallVerdict.ACCEPTED)
    assert second == (200, {"accepted": 5, "replaces": None}, CallVerdict.REPLAYED)
    assert written() == ["charges of token 5"]


def test_the_same_token_with_other_content_at_once_is_refused_after_the_first_commits():
    first, second = race(5, 5, second_total="99.00")

    assert first[2] == CallVerdict.ACCEPTED
    assert second == (422, {"refused": "conflict", "token": 5, "accepted": 5}, "conflict")
    assert written() == ["charges of token 5"]
