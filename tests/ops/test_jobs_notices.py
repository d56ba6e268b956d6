"""The notice publisher (hoa.jobs.scheduled.publish_notices) and its delivery hook.

On real PostgreSQL.

Deliveries are counted twice over: the ``delivered_at`` record the hook claims and the
log line it writes (captured from the ``hoa.jobs.delivery`` logger).
"""

import signal
import threading
from collections import Counter
from concurrent import futures
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.utils import timezone

from hoa.jobs.delivery import deliver_notice
from hoa.jobs.scheduled import PUBLISH_NOTICES_LOCK, PublishResult, publish_notices
from hoa.models import Notice
from tests.harness.processes import start_manage
from tests.harness.waiting import wait_until
from tests.jobs_support import (
    advisory_lock_holders,
    backends_of,
    backends_waiting,
    captured_log,
    make_due_notices,
    table_locked,
    worker_threads,
)

pytestmark = pytest.mark.django_db(transaction=True)

NOTICE_UPDATE = 'UPDATE "hoa_notice"'


def delivered_resources(log) -> Counter:
    return Counter(record.resource for record in log.records if record.outcome == "delivered")


def test_due_notices_are_published_and_delivered_once_and_scheduled_ones_wait(maple):
    now = timezone.now()
    due = make_due_notices(maple, 2, now=now)
    scheduled = Notice.objects.create(
        organization=maple, title="Later", publish_at=now + timedelta(minutes=5)
    )
    old = Notice.objects.create(
        organization=maple,
        title="Old",
        publish_at=now - timedelta(days=2),
        published_at=now - timedelta(days=2),
        delivered_at=now - timedelta(days=2),
    )

    with captured_log("hoa.jobs.delivery") as log:
        result = publish_notices(now=now)
        again = publish_notices(now=now + timedelta(seconds=1))

    assert result == PublishResult(acquired=True, published=2, delivered=2, batches=1)
    assert again == PublishResult(acquired=True, published=0, delivered=0, batches=0)
    assert delivered_resources(log) == {f"notice:{n.pk}": 1 for n in due}
    for notice in due:
        notice.refresh_from_db()
        assert notice.published_at == now
        assert notice.delivered_at is not None
    scheduled.refresh_from_db()
    assert (scheduled.published_at, scheduled.delivered_at) == (None, None)
    assert Notice.objects.get(pk=old.pk).published_at == now - timedelta(days=2)


def test_notices_are_published_across_batches_each_delivered_once(maple):
    notices = make_due_notices(maple, 7)

    with captured_log("hoa.jobs.delivery") as log:
        result = publish_notices(batch_size=3)

    assert result == PublishResult(acquired=True, published=7, delivered=7, batches=3)
    assert delivered_resources(log) == {f"notice:{n.pk}": 1 for n in notices}
    assert Notice.objects.filter(delivered_at__isnull=True).count() == 0


def test_two_concurrent_publishers_one_publishes_the_other_skips(maple):
    notices = make_due_notices(maple, 3)
    barrier = threading.Barrier(2)

    def publish() -> PublishResult:
        barrier.wait(timeout=10)
        return publish_notices()

    with captured_log("hoa.jobs.delivery") as log, worker_threads(2) as submit:
        # Hold point: the winner's UPDATE waits for this SHARE lock, inside its pass.
        with table_locked("hoa_notice"):
            runs = [submit(publish), submit(publish)]
            wait_until(lambda: backends_waiting(NOTICE_UPDATE), what="a publisher inside its pass")
            assert len(advisory_lock_holders(PUBLISH_NOTICES_LOCK)) == 1
            done, _ = futures.wait(runs, timeout=30, return_when=futures.FIRST_COMPLETED)
            assert len(done) == 1, "the losing publisher must not wait for the winner"
            (loser,) = done
            (winner,) = [run for run in runs if run is not loser]
            assert loser.result() == PublishResult(acquired=False)
            assert not winner.done()
            assert delivered_resources(log) == {}
        assert winner.result(timeout=30) == PublishResult(
            acquired=True, published=3, delivered=3, batches=1
        )

    assert delivered_resources(log) == {f"notice:{n.pk}": 1 for n in notices}
    assert Notice.objects.filter(published_at__isnull=True).count() == 0


@pytest.fixture
def publication_commit_fails(transactional_db):
    """Make every commit that publishes a notice fail, as a commit can (deferred check)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE FUNCTION test_refuse_publication() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN RAISE EXCEPTION 'publication refused at commit'; END $$;
            CREATE CONSTRAINT TRIGGER test_refuse_publication AFTER UPDATE ON hoa_notice
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
            WHEN (OLD.published_at IS NULL AND NEW.published_at IS NOT NULL)
            EXECUTE FUNCTION test_refuse_publication();
            """
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER test_refuse_publication ON hoa_notice;"
                "DROP FUNCTION test_refuse_publication();"
            )


def test_a_publication_whose_commit_fails_delivers_nothing(maple, publication_commit_fails):
    notices = make_due_notices(maple, 2)

    with captured_log("hoa.jobs.delivery") as log, pytest.raises(DatabaseError, match="refused"):
        publish_notices()

    assert delivered_resources(log) == {}
    assert Notice.objects.filter(published_at__isnull=False).count() == 0
    assert Notice.objects.filter(delivered_at__isnull=False).count() == 0
    assert advisory_lock_holders(PUBLISH_NOTICES_LOCK) == []
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE hoa_notice DISABLE TRIGGER test_refuse_publication")
    with captured_log("hoa.jobs.delivery") as log:
        assert publish_notices().delivered == 2
    assert delivered_resources(log) == {f"notice:{n.pk}": 1 for n in notices}


def test_a_notice_stranded_between_commit_and_delivery_is_delivered_by_the_next_pass(maple):
    # What a publisher killed after its commit but before its on_commit hook leaves behind.
    stranded = Notice.objects.create(
        organization=maple, title="Stranded", published_at=timezone.now()
    )

    with captured_log("hoa.jobs.delivery") as log:
        first = publish_notices()
        second = publish_notices()

    assert first == PublishResult(acquired=True, published=0, delivered=1, batches=0)
    assert second == PublishResult(acquired=True, published=0, delivered=0, batches=0)
    assert delivered_resources(log) == {f"notice:{stranded.pk}": 1}


def test_the_delivery_hook_delivers_a_published_notice_only_once(maple):
    published = Notice.objects.create(organization=maple, title="Hi", published_at=timezone.now())
    unpublished = Notice.objects.create(organization=maple, title="Not yet")

    with captured_log("hoa.jobs.delivery") as log:
        assert deliver_notice(published.pk) is True
        assert deliver_notice(published.pk) is False
        assert deliver_notice(unpublished.pk) is False

    assert delivered_resources(log) == {f"notice:{published.pk}": 1}
    assert Notice.objects.get(pk=unpublished.pk).delivered_at is None


@pytest.mark.slow
def test_a_publisher_killed_before_commit_publishes_and_delivers_nothing(maple, subprocess_env):
    notices = make_due_notices(maple, 3)
    env = {**subprocess_env, "PGAPPNAME": "publisher-to-kill"}

    with table_locked("hoa_notice"):
        child = start_manage(
            "publish_notices",
            "--batch-size",
            "1",
            env=env,
            text=False,
        )
        try:
            wait_until(
                lambda: backends_waiting(NOTICE_UPDATE, application_name="publisher-to-kill"),
                what="the child publisher blocked inside its pass",
            )
            assert [app for _, app in advisory_lock_holders(PUBLISH_NOTICES_LOCK)] == [
                "publisher-to-kill"
            ]
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=10) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
            child.stdout.close()
            child.stderr.close()
    wait_until(lambda: not backends_of("publisher-to-kill"), what="the dead child's sessions")

    assert Notice.objects.filter(published_at__isnull=False).count() == 0
    with captured_log("hoa.jobs.delivery") as log:
        result = publish_notices()
    assert result == PublishResult(acquired=True, published=3, delivered=3, batches=1)
    assert delivered_resources(log) == {f"notice:{n.pk}": 1 for n in notices}
