"""locking's pytest plugin (locking/pytest_plugin.py) and the helpers it hands out
(locking/testing.py): leases on names of the test's own, released at the end; a holder
paused past its lease, refused by the fence when it wakes; sealed calls posted to a
``fenced_receiver`` view through Django's test client, a lower token refused."""

import subprocess
import sys
import threading

import pytest
from django.db import connection, transaction

from locking import LeaseState, LockHeld, StaleFencingToken, advance_fence
from locking.keys import lock_key
from locking.receiving import CallVerdict
from locking.testing import LeaseFactory, PausedHolder, ReceiverClient
from locking.tests.support import SOURCE_ROOT
from locking.tests.testapp.models import FencedThing
from locking.tests.urls import RECEIVER_SECRET

pytestmark = pytest.mark.django_db(transaction=True)

# What the plugin may import when pytest loads it: locking's package (which reads no
# setting), nothing that needs Django's settings or its app registry.
LOAD = """
import sys
import locking.pytest_plugin
from django.conf import settings
print(settings.configured, sorted(m for m in sys.modules if m in sys.argv[1:]))
"""


def test_loading_the_plugin_needs_no_django_settings():
    result = subprocess.run(
        [sys.executable, "-c", LOAD, "locking.models", "locking.testing", "django.test"],
        cwd=SOURCE_ROOT,
        env={"PATH": "/usr/bin:/bin"},  # no DJANGO_SETTINGS_MODULE
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "False []\n"


def test_the_lease_factory_grants_on_names_of_the_tests_own_and_releases_at_the_end(
    fence_lock, redis_client
):
    factory = LeaseFactory(fence_lock)
    other = LeaseFactory(fence_lock)

    first, second, elsewhere = factory(), factory(), other()
    named = factory("fenced-thing:named")
    released_early = factory()
    released_early.release()

    assert len({first.resource, second.resource, elsewhere.resource}) == 3
    assert first.resource.startswith("test:")
    assert (named.resource, named.token) == ("fenced-thing:named", 1)
    with pytest.raises(LockHeld):
        factory(first.resource)
    factory.close()
    assert [lease.state for lease in (first, second, named)] == [LeaseState.RELEASED] * 3
    assert redis_client.exists(*(lock_key(lease.resource) for lease in factory.granted)) == 0
    assert redis_client.exists(lock_key(elsewhere.resource)) == 1  # another factory's


def test_a_paused_holders_lease_ran_out_in_redis_but_not_by_its_own_clock(
    paused_holder, lease_factory, redis_client
):
    paused = paused_holder()

    assert isinstance(paused, PausedHolder)
    assert redis_client.exists(lock_key(paused.lease.resource)) == 0
    assert paused.lease.state is LeaseState.HELD
    paused.lease.check()  # it does not know: only the fence can refuse it
    newer = lease_factory(paused.lease.resource)  # no waiting on the TTL
    assert newer.token == paused.token + 1


def test_a_paused_holder_wakes_in_a_thread_of_its_own_and_the_fence_refuses_it(
    paused_holder, lease_factory
):
    thing = FencedThing.objects.create(name="before")
    rows = FencedThing.objects.filter(pk=thing.pk)
    paused = paused_holder(f"fenced-thing:{thing.pk}")
    newer = lease_factory(f"fenced-thing:{thing.pk}")
    with transaction.atomic():
        advance_fence(rows, newer)
        rows.update(name="by the newer holder")
    woke_in: list[tuple[str, int]] = []

    def late_write(lease):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            woke_in.append((threading.current_thread().name, cursor.fetchone()[0]))
        with transaction.atomic():
            advance_fence(rows, lease)
            rows.update(name="by the paused holder")

    with pytest.raises(StaleFencingToken) as refused:
        paused.resume(late_write)

    assert (refused.value.token, refused.value.recorded) == (paused.token, newer.token)
    [(thread, backend)] = woke_in
    assert thread == f"paused holder {paused.token}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert backend != cursor.fetchone()[0]
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("by the newer holder", newer.token)
    assert paused.resume(lambda lease: lease.token) == paused.token  # what the work returns


def test_the_receiver_client_posts_sealed_calls_and_a_lower_token_is_refused(
    lease_factory, receiver_client, settings
):
    settings.ROOT_URLCONF = "locking.tests.urls"
    receiver_client.secret = RECEIVER_SECRET
    older = lease_factory()
    older.release()
    newer = lease_factory(older.resource)  # token 2: the call sent below token 1 is older's

    first = receiver_client.post(
        "/receiver/billing/", {"total": "10.00"}, token=newer, idempotency_key="bill:7"
    )
    again = receiver_client.replay(first)
    late = receiver_client.replay_older(first)

    assert first.endpoint == "billing-view"  # the scope of the view at the URL
    assert (first.status, first.verdict, first.accepted) == (200, CallVerdict.ACCEPTED, 2)
    assert first.answer == {"accepted": 2, "replaces": None}
    assert (again.status, again.verdict) == (200, CallVerdict.REPLAYED)
    assert (late.token.token, late.status, late.verdict, late.accepted) == (
        1,
        409,
        CallVerdict.STALE,
        2,
    )
    assert {k: late.answer[k] for k in ("refused", "token", "accepted")} == {
        "refused": "stale",
        "token": 1,
        "accepted": 2,
    }


def test_the_receiver_client_signs_with_the_setting_and_says_when_a_url_is_no_receiver(
    lease_factory, settings
):
    settings.ROOT_URLCONF = "locking.tests.urls"
    settings.LOCK_RECEIVER_SECRET = "not the view's own secret"
    client = ReceiverClient()
    lease = lease_factory()

    wrong = client.post("/receiver/billing/", {}, token=lease, idempotency_key="bill:8")

    assert (wrong.status, wrong.verdict, wrong.accepted) == (401, CallVerdict.UNVERIFIED, None)
    with pytest.raises(ValueError, match="no fenced_receiver view: pass endpoint="):
        client.post("/admin/", {}, token=lease, idempotency_key="bill:8")
    with pytest.raises(TypeError, match="takes the lease"):
        client.post("/receiver/billing/", {}, token=lease.token, idempotency_key="bill:8")


def test_the_documented_example_a_paused_holders_late_call_is_refused_by_the_receiver(
    paused_holder, lease_factory, receiver_client, settings
):
    """docs/locking/testing.md's second example, on a receiver given no secret of its own
    (it signs with LOCK_RECEIVER_SECRET) behind a project's decorator."""
    settings.ROOT_URLCONF = "locking.tests.urls_receiver_without_secret"
    settings.LOCK_RECEIVER_SECRET = "test-receiver-secret"
    paused = paused_holder("invoice:7")
    newer = lease_factory("invoice:7")

    first = receiver_client.post(
        "/hooks/dispatch/", {"total": "10.00"}, token=newer, idempotency_key="invoice-7"
    )
    late = receiver_client.post(
        "/hooks/dispatch/", {"total": "10.00"}, token=paused.lease, idempotency_key="invoice-7"
    )

    assert first.endpoint == "dispatch"
    assert (first.status, first.verdict) == (200, CallVerdict.ACCEPTED)
    assert (late.status, late.verdict, late.accepted) == (409, CallVerdict.STALE, newer.token)
    assert late.answer["refused"] == "stale"
