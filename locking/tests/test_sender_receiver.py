"""The wheel's sender and the wheel's receiver, talking over HTTP: ``post_fenced`` against a
``fenced_receiver`` view served by a real server thread (Django's threaded WSGI server),
its records in the test database.

The first call of a key is done; the same call again is answered as the first time; a
lower token is a stale holder (``StaleAtReceiver``, with the token the receiver accepted,
which its signed answer names); a higher token replaces the earlier call. A call the
receiver cannot verify is refused with nothing kept.
"""

import json
import threading
from datetime import timedelta

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.db import transaction

from locking import FencingToken, advance_fence, post_fenced, run_fenced
from locking.audit import Attempt
from locking.keys import lock_key
from locking.models import FenceEvent, ReceivedCall
from locking.receiving import StaleAtReceiver
from locking.sending import CallRefused
from locking.tests.testapp.models import FencedThing
from locking.tests.urls import RECEIVER_SECRET

pytestmark = pytest.mark.django_db(transaction=True)

ENDPOINT = "billing-view"  # the scope of locking/tests/urls.py's billing_view
KEY = "bill:2026-03"
RESOURCE = "fenced-thing:receiver"
TTL = timedelta(seconds=30)


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def url(transactional_db, settings):
    """The address of ``billing_view`` (locking/tests/urls.py) served by Django's threaded
    WSGI server (what ``runserver`` runs), in a thread of this process: each request has
    its own thread and its own connection to the test database. Whichever settings the
    suite runs with (locking's, or a project's), the server answers for 127.0.0.1 with
    locking's test URLconf."""
    settings.ROOT_URLCONF = "locking.tests.urls"
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    server = ThreadedWSGIServer(("127.0.0.1", 0), _Quiet, allow_reuse_address=False)
    server.set_app(WSGIHandler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}/receiver/billing/"
    server.shutdown()
    server.server_close()
    thread.join(5)


def grant(token: int) -> FencingToken:
    return FencingToken(RESOURCE, token, f"grant-{token}")


def send(url: str, lease, *, key: str = KEY, total: str = "10.00", **options):
    arguments = {"endpoint": ENDPOINT, "secret": RECEIVER_SECRET, "timeout": 5.0, **options}
    return post_fenced(url, {"total": total}, lease=lease, idempotency_key=key, **arguments)


def kept() -> list[tuple]:
    return list(ReceivedCall.objects.values_list("idempotency_key", "token", "replaced_token"))


def test_a_call_is_done_a_replay_is_answered_the_same_a_lower_token_is_stale(url):
    done = send(url, grant(5))
    replayed = send(url, grant(5))
    with pytest.raises(StaleAtReceiver) as stale:
        send(url, grant(3))

    assert (done.status, json.loads(done.content)) == (200, {"accepted": 5, "replaces": None})
    assert (replayed.status, replayed.content) == (done.status, done.content)
    assert (stale.value.token, stale.value.accepted, stale.value.url) == (3, 5, url)
    assert kept() == [(KEY, 5, None)]


def test_a_higher_token_replaces_the_earlier_call(url):
    send(url, grant(5))

    replaced = send(url, grant(8))

    assert json.loads(replaced.content) == {"accepted": 8, "replaces": 5}
    assert kept() == [(KEY, 8, 5)]
    with pytest.raises(StaleAtReceiver) as stale:
        send(url, grant(5))
    assert stale.value.accepted == 8


def test_the_same_token_with_other_content_is_refused(url):
    send(url, grant(5))

    with pytest.raises(CallRefused) as refused:
        send(url, grant(5), total="99.00")

    assert refused.value.status == 422
    assert kept() == [(KEY, 5, None)]


@pytest.mark.parametrize(
    "options",
    [{"secret": ""}, {"secret": "another secret"}, {"endpoint": "dispatch"}],
    ids=["unsigned", "another-secret", "another-endpoint"],
)
def test_a_call_the_receiver_cannot_verify_is_refused_and_nothing_is_kept(url, options):
    with pytest.raises(CallRefused) as refused:
        send(url, grant(5), **options)

    assert (refused.value.status, refused.value.reason) == (401, "HTTP 401")
    assert kept() == []


def test_a_paused_holders_late_call_is_refused_at_the_receiver_and_recorded_stale(
    url, fence_lock, redis_client
):
    """The whole story with real leases: a holder pauses past its lease, a newer holder's
    call gets there first; the older call is refused by the receiver, ``run_fenced``
    records it as stale, and the row is not written."""
    thing = FencedThing.objects.create(name="March charges")
    resource = f"fenced-thing:{thing.pk}"

    def overtaken(lease) -> int:
        redis_client.delete(lock_key(resource))  # paused past its lease...
        with fence_lock.acquire(resource, ttl=TTL) as rival:
            send(url, rival)  # ...while a newer holder's call got there first
        send(url, lease)
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
        return lease.token

    with pytest.raises(StaleAtReceiver) as stale:
        run_fenced(resource, overtaken, ttl=TTL, attempt=Attempt(actor="alice", operation="bill"))

    assert (stale.value.token, stale.value.accepted) == (1, 2)
    assert list(FenceEvent.objects.for_resource(resource).values_list("outcome", "token")) == [
        ("stale", 1)
    ]
    assert FencedThing.objects.get(pk=thing.pk).last_fence_token == 0
    assert kept() == [(KEY, 2, None)]
