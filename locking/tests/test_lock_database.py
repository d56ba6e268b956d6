"""``LOCK_DATABASE``: the fence, its epochs, the audit and run_fenced's checks in one alias.

The test settings define a second alias (``second``) on the same PostgreSQL server, with a
database of its own. With ``LOCK_DATABASE = "second"`` every row locking writes goes there,
and ``default`` stays empty of them.
"""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction
from django.db.transaction import TransactionManagementError
from django.urls import reverse
from django.utils import timezone

from locking import FenceLock, LockHeld, Outcome, advance_fence, prepare_fences, run_fenced
from locking.asyncio import aadvance_fence, arun_fenced
from locking.audit import Attempt, record_fence_event
from locking.models import FenceEpoch, FenceEvent
from locking.tests.support import run_async
from locking.tests.testapp.models import FencedThing

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "second"])

SECOND = "second"
TTL = timedelta(seconds=30)
ALICE = Attempt(actor="alice", operation="rename", scope="box:1")


@pytest.fixture(autouse=True)
def lock_database(settings):
    settings.LOCK_DATABASE = SECOND


@pytest.fixture
def thing():
    return FencedThing.objects.using(SECOND).create(name="before")


def rows(model, alias: str) -> list[tuple]:
    if model is FenceEvent:
        return list(model.objects.using(alias).order_by("id").values_list("outcome", "token"))
    return list(model.objects.using(alias).order_by("resource").values_list("resource", "epoch"))


def rename(thing: FencedThing, name: str):
    """A work that writes under the fence, its audit row committing with it."""

    def work(lease) -> int:
        with transaction.atomic(using=SECOND):
            advance_fence(FencedThing.objects.using(SECOND).filter(pk=thing.pk), lease)
            FencedThing.objects.using(SECOND).filter(pk=thing.pk).update(name=name)
            lease.record_committed()
        return lease.token

    return work


def test_run_fenced_writes_the_epoch_the_fence_and_the_audit_in_the_lock_database(thing):
    resource = f"fenced-thing:{thing.pk}"

    assert run_fenced(resource, rename(thing, "after"), ttl=TTL, attempt=ALICE) == 1

    held = FenceLock().acquire(resource, ttl=TTL, holder="bob")
    with pytest.raises(LockHeld):
        run_fenced(resource, rename(thing, "never"), ttl=TTL, attempt=ALICE)
    held.release()

    thing = FencedThing.objects.using(SECOND).get(pk=thing.pk)
    assert (thing.name, thing.last_fence_token) == ("after", 1)
    assert rows(FenceEvent, SECOND) == [(Outcome.COMMITTED, 1), (Outcome.BUSY, 2)]
    assert rows(FenceEpoch, SECOND) == [(resource, 0)]
    assert rows(FenceEvent, "default") == []
    assert rows(FenceEpoch, "default") == []


def test_run_fenced_refuses_to_run_inside_a_transaction_of_the_lock_database(thing):
    worked: list[int] = []

    with transaction.atomic(using=SECOND), pytest.raises(TransactionManagementError):
        run_fenced(f"fenced-thing:{thing.pk}", worked.append, ttl=TTL, attempt=ALICE)

    assert worked == []  # refused before the grant
    assert rows(FenceEvent, SECOND) == rows(FenceEpoch, SECOND) == []


def test_arun_fenced_keeps_the_audit_and_epochs_in_the_lock_database_too(thing):
    resource = f"fenced-thing:{thing.pk}"
    queryset = FencedThing.objects.using(SECOND).filter(pk=thing.pk)

    async def work(lease) -> int:
        return await aadvance_fence(queryset, lease, lambda: queryset.update(name="async"))

    assert run_async(lambda: arun_fenced(resource, work, ttl=TTL, attempt=ALICE)) == 1

    assert queryset.get().name == "async"
    assert rows(FenceEvent, SECOND) == [(Outcome.COMMITTED, 1)]
    assert rows(FenceEpoch, SECOND) == [(resource, 0)]
    assert rows(FenceEvent, "default") == rows(FenceEpoch, "default") == []


def test_prepared_epochs_recorded_events_and_their_pruning_use_the_lock_database():
    assert prepare_fences(["batch:1", "batch:2"]) == 2
    record_fence_event(resource="batch:1", outcome=Outcome.FAILED, token=1, actor="cron")
    FenceEvent.objects.using(SECOND).filter(resource="batch:1").update(
        at=timezone.now() - timedelta(days=100)
    )

    assert rows(FenceEpoch, SECOND) == [("batch:1", 0), ("batch:2", 0)]
    assert rows(FenceEvent, SECOND) == [(Outcome.FAILED, 1)]
    out = StringIO()
    call_command("prune_fence_events", "--days", "90", stdout=out)
    assert out.getvalue().startswith("Deleted 1 fence event older than 90 days")
    assert rows(FenceEvent, SECOND) == []
    assert rows(FenceEvent, "default") == rows(FenceEpoch, "default") == []


def test_the_audit_admin_lists_the_lock_databases_events(client, django_user_model):
    FenceEvent.objects.using(SECOND).create(resource="fenced-thing:9", outcome=Outcome.STALE)
    admin = django_user_model.objects.create_superuser("root", password="pw")
    client.force_login(admin)

    page = client.get(reverse("admin:locking_fenceevent_changelist"))

    assert page.status_code == 200
    assert [event.resource for event in page.context["cl"].result_list] == ["fenced-thing:9"]
