"""``run_fenced`` end to end, the audit trail, and recovery from a lost Redis counter.

Every test here is transactional: ``run_fenced`` refuses to run inside ``atomic()``, and
the point of the audit is that its record survives the work's rolled-back transaction.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta

import pytest
import redis
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from locking import (
    FenceLock,
    LeasedAttempt,
    LockHeld,
    LockUnavailable,
    Outcome,
    StaleFencingToken,
    advance_fence,
    insert_fenced,
    run_fenced,
)
from locking.audit import Attempt, record_fence_event
from locking.epochs import current_epoch, first_token
from locking.keys import fence_key, lock_key
from locking.models import FenceEvent
from locking.tests.support import closed_port
from locking.tests.testapp.models import FencedThing

pytestmark = pytest.mark.django_db(transaction=True)

TTL = timedelta(seconds=30)
ALICE = Attempt(actor="alice", operation="assign_vendor", scope="org:1", ip="192.0.2.7")


@pytest.fixture
def thing(db):
    return FencedThing.objects.create(name="Leaking roof")


@pytest.fixture
def resource(thing):
    return f"fenced-thing:{thing.pk}"


def fenced_name(thing: FencedThing, name: str, calls: list | None = None):
    """Work that writes ``name`` under the fence and returns the token it used."""

    def work(lease) -> int:
        if calls is not None:
            calls.append(lease.token)
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            FencedThing.objects.filter(pk=thing.pk).update(name=name)
        return lease.token

    return work


def events(resource: str) -> list[tuple]:
    return list(
        FenceEvent.objects.for_resource(resource)
        .order_by("id")
        .values_list("outcome", "token", "detail")
    )


def db_token(thing: FencedThing) -> int:
    return FencedThing.objects.values_list("last_fence_token", flat=True).get(pk=thing.pk)


# --- outcomes ---------------------------------------------------------------------------


def test_committed_attempt_is_recorded_with_its_token_and_the_lease_released(
    thing, resource, redis_client
):
    token = run_fenced(resource, fenced_name(thing, "fixed"), ttl=TTL, attempt=ALICE)

    assert token == 1
    event = FenceEvent.objects.get()
    assert (event.resource, event.token, event.outcome) == (resource, 1, "committed")
    assert (event.actor, event.operation, event.scope, event.ip) == (
        "alice",
        "assign_vendor",
        "org:1",
        "192.0.2.7",
    )
    assert redis_client.exists(lock_key(resource)) == 0
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("fixed", 1)


def test_result_outcome_is_recorded_instead_of_committed(resource):
    @dataclass
    class Done:
        outcome: Outcome = Outcome.ALREADY_DONE

    result = run_fenced(resource, lambda lease: Done(), ttl=TTL, attempt=ALICE)

    assert result == Done()
    assert events(resource) == [("already_done", 1, "")]


def test_record_committed_writes_the_audit_row_in_the_work_transaction_once(thing, resource):
    seen_inside: list[int] = []

    def work(lease) -> int:
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            lease.record_committed()
            # Inside the transaction, before its commit: the row is there, in it.
            seen_inside.append(FenceEvent.objects.for_resource(resource).count())
        return lease.token

    before = timezone.now()
    assert run_fenced(resource, work, ttl=TTL, attempt=ALICE) == 1

    assert seen_inside == [1]
    assert events(resource) == [("committed", 1, "")]
    event = FenceEvent.objects.get()
    assert (event.actor, event.operation, event.scope, event.ip) == (
        "alice",
        "assign_vendor",
        "org:1",
        "192.0.2.7",
    )
    assert before <= event.at <= timezone.now()


def test_an_audit_row_that_cannot_be_written_raises_in_the_work_and_nothing_commits(
    thing, resource
):
    # An address the inet column refuses (Django's adapter, before the statement is sent):
    # the audit row fails inside the work's transaction (at the fence, whose statement
    # carries it), which must abort with it rather than commit the write unrecorded.
    garbled = Attempt(actor="alice", operation="assign_vendor", scope="org:1", ip="not-an-ip")
    reached: list[str] = []

    def work(lease):
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            lease.record_committed()
            reached.append("after the audit row")

    with pytest.raises(ValueError, match="not-an-ip"):
        run_fenced(resource, work, ttl=TTL, attempt=garbled)

    assert reached == []
    assert db_token(thing) == 0
    assert events(resource) == []


def test_record_committed_rolled_back_with_the_work_leaves_the_refusal_recorded_outside(
    thing, resource
):
    class Refused(Exception):
        outcome = Outcome.FAILED

    def work(lease):
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            lease.record_committed()
            raise Refused("changed its mind")

    with pytest.raises(Refused):
        run_fenced(resource, work, ttl=TTL, attempt=ALICE)

    assert events(resource) == [("failed", 1, "changed its mind")]
    assert db_token(thing) == 0


def test_record_committed_outside_a_transaction_is_refused(resource):
    with pytest.raises(TransactionManagementError):
        run_fenced(resource, lambda lease: lease.record_committed(), ttl=TTL, attempt=ALICE)
    assert events(resource) == []


def test_busy_is_recorded_naming_the_holder_and_the_work_never_runs(thing, resource, fence_lock):
    held = fence_lock.acquire(resource, ttl=TTL, holder="bob")
    calls: list[int] = []

    with pytest.raises(LockHeld) as caught:
        run_fenced(resource, fenced_name(thing, "x", calls), ttl=TTL, attempt=ALICE)

    assert "bob" in caught.value.holder
    assert calls == []
    [(outcome, token, detail)] = events(resource)
    assert (outcome, token) == ("busy", held.token)
    assert "bob" in detail
    assert db_token(thing) == 0
    assert held.release() is True  # the refusal did not touch the holder's lease


def test_stale_rejection_is_recorded_outside_the_rolled_back_transaction(
    thing, resource, fence_lock
):
    calls: list[int] = []

    def paused_then_overtaken(lease) -> None:
        calls.append(lease.token)
        # While this holder is paused its lease expires and a newer holder commits.
        fence_lock.client.pexpire(lock_key(resource), 0)
        with fence_lock.acquire(resource, ttl=TTL) as newer:
            fenced_name(thing, "newer")(newer)
        with transaction.atomic():
            FencedThing.objects.create(name="written by the stale holder")
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)

    with pytest.raises(StaleFencingToken) as caught:
        run_fenced(resource, paused_then_overtaken, ttl=TTL, attempt=ALICE, lock=fence_lock)

    assert (caught.value.token, caught.value.recorded) == (1, 2)
    assert calls == [1]  # a genuinely stale holder is not retried
    assert events(resource) == [("stale", 1, "a newer holder recorded token 2")]
    assert not FencedThing.objects.filter(name="written by the stale holder").exists()
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("newer", 2)
    assert fence_lock.current_token(resource) == 2  # not reseeded


def test_unavailable_is_recorded_and_the_work_never_runs(thing, resource, redis_client):
    unreachable = FenceLock(
        client=redis.Redis.from_url(
            f"redis://127.0.0.1:{closed_port()}/0", socket_timeout=0.2, socket_connect_timeout=0.2
        )
    )
    calls: list[int] = []

    with pytest.raises(LockUnavailable):
        run_fenced(
            resource,
            fenced_name(thing, "x", calls),
            ttl=TTL,
            attempt=ALICE,
            lock=unreachable,
        )

    assert calls == []
    [(outcome, token, detail)] = events(resource)
    assert (outcome, token) == ("unavailable", None)
    assert "refused" in detail.lower()
    assert db_token(thing) == 0
    assert redis_client.dbsize() == 0


def test_error_that_declares_its_outcome_is_recorded_with_it_and_re_raised(
    thing, resource, redis_client
):
    class DispatchDown(Exception):
        outcome = Outcome.FAILED

    def work(lease):
        raise DispatchDown("dispatch answered 503")

    with pytest.raises(DispatchDown):
        run_fenced(resource, work, ttl=TTL, attempt=ALICE)

    assert events(resource) == [("failed", 1, "dispatch answered 503")]
    assert redis_client.exists(lock_key(resource)) == 0
    assert db_token(thing) == 0


def test_error_without_an_outcome_is_re_raised_unrecorded_and_the_lease_released(
    resource, redis_client
):
    def work(lease):
        raise KeyError("a bug, not an answer")

    with pytest.raises(KeyError):
        run_fenced(resource, work, ttl=TTL, attempt=ALICE)

    assert events(resource) == []
    assert redis_client.exists(lock_key(resource)) == 0


def test_run_fenced_refuses_to_run_inside_atomic_and_touches_nothing(thing, resource, redis_client):
    calls: list[int] = []
    with pytest.raises(TransactionManagementError), transaction.atomic():
        run_fenced(resource, fenced_name(thing, "x", calls), ttl=TTL, attempt=ALICE)

    assert calls == []
    assert FenceEvent.objects.count() == 0
    assert redis_client.dbsize() == 0


def test_bad_resource_name_raises_value_error_and_records_nothing():
    with pytest.raises(ValueError):
        run_fenced("bad name", lambda lease: None, ttl=TTL, attempt=ALICE)
    assert FenceEvent.objects.count() == 0


# --- counter loss -----------------------------------------------------------------------


def test_lost_counter_starts_a_new_epoch_and_the_next_write_succeeds_on_its_first_call(
    thing, resource, fence_lock, redis_client
):
    db_tokens = []
    for name in ("first", "second", "third"):
        run_fenced(resource, fenced_name(thing, name), ttl=TTL, attempt=ALICE)
        db_tokens.append(db_token(thing))
    assert db_tokens == [1, 2, 3]
    assert current_epoch(resource) == 0

    redis_client.flushdb()  # Redis restarted without persistence: the counter is gone
    assert fence_lock.current_token(resource) == 0
    calls: list[int] = []

    token = run_fenced(resource, fenced_name(thing, "after loss", calls), ttl=TTL, attempt=ALICE)

    # The grant itself saw the loss: no doomed low token ever reached the work.
    assert calls == [first_token(1) + 1]
    assert token == db_token(thing) == first_token(1) + 1
    assert current_epoch(resource) == 1
    assert [outcome for outcome, *_ in events(resource)] == ["committed"] * 4


def test_counter_behind_the_recorded_token_starts_an_epoch_above_it_and_retries_once(
    thing, resource, fence_lock, redis_client
):
    """A counter that is present but behind (a failover to a replica that missed grants,
    an AOF that lost its last second) is caught by the fence, not the grant."""
    FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=40)
    redis_client.set(fence_key(resource), 3)
    calls: list[int] = []

    token = run_fenced(resource, fenced_name(thing, "retried", calls), ttl=TTL, attempt=ALICE)

    assert calls == [4, first_token(1) + 1]
    assert token == db_token(thing) == first_token(1) + 1
    assert events(resource) == [
        (
            "stale",
            4,
            "Redis fence counter was behind the recorded token 40: new epoch started, retrying",
        ),
        ("committed", first_token(1) + 1, ""),
    ]
    # The counter is never lowered, even when asked.
    assert fence_lock.reseed(resource, 2) == first_token(1) + 1


# --- the audit helper -------------------------------------------------------------------


def test_record_fence_event_truncates_long_labels():
    event = record_fence_event(resource="r", outcome="busy", actor="a" * 300, operation="o" * 80)
    event.refresh_from_db()
    assert (len(event.actor), len(event.operation)) == (200, 50)


def test_record_fence_event_inside_a_transaction_warns_that_a_rollback_erases_it(caplog):
    with caplog.at_level(logging.WARNING, logger="locking.audit"), transaction.atomic():
        record_fence_event(resource="r", outcome="committed", token=3)
    assert "a rollback would erase it" in caplog.text


def test_record_fence_event_swallows_a_database_error_and_writes_nothing(caplog):
    with caplog.at_level(logging.ERROR, logger="locking.audit"):
        # Longer than the column: PostgreSQL refuses the row.
        assert record_fence_event(resource="r", outcome="x" * 30) is None
    assert "could not record fence event" in caplog.text
    assert FenceEvent.objects.count() == 0


# --- LeasedAttempt: run_fenced in two halves, attempts that commit together -------------


def test_leased_attempts_commit_together_each_with_its_row_audit_and_release(redis_client):
    things = [FencedThing.objects.create(name=f"roof {n}") for n in range(3)]
    resources = [f"fenced-thing:{thing.pk}" for thing in things]
    attempts = [LeasedAttempt(r, ttl=TTL, attempt=ALICE) for r in resources]
    seen_inside = []

    with transaction.atomic():
        for thing, attempt in zip(things, attempts, strict=True):
            advance_fence(FencedThing.objects.filter(pk=thing.pk), attempt.lease)
            FencedThing.objects.filter(pk=thing.pk).update(name="fixed")
            attempt.lease.record_committed()
        # All three audit rows are in the one transaction, before its commit.
        seen_inside.append(FenceEvent.objects.filter(resource__in=resources).count())
        # Every lease is still held while the shared transaction is open.
        assert all(redis_client.exists(lock_key(r)) for r in resources)
    for attempt in attempts:
        attempt.finished(attempt.lease.token)

    assert seen_inside == [3]
    for thing, resource in zip(things, resources, strict=True):
        assert events(resource) == [("committed", 1, "")]  # once: not again after the commit
        assert redis_client.exists(lock_key(resource)) == 0
        thing.refresh_from_db()
        assert (thing.name, thing.last_fence_token) == ("fixed", 1)


def test_a_stale_leased_attempt_in_its_own_savepoint_leaves_the_others_to_commit(fence_lock):
    kept, overtaken = (FencedThing.objects.create(name=n) for n in ("kept", "overtaken"))
    first = LeasedAttempt(f"fenced-thing:{kept.pk}", ttl=TTL, attempt=ALICE, lock=fence_lock)
    stale_resource = f"fenced-thing:{overtaken.pk}"
    second = LeasedAttempt(stale_resource, ttl=TTL, attempt=ALICE, lock=fence_lock)
    # While the second is paused, its lease expires and a newer holder commits.
    fence_lock.client.pexpire(lock_key(stale_resource), 0)
    with fence_lock.acquire(stale_resource, ttl=TTL) as newer:
        fenced_name(overtaken, "newer")(newer)

    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=kept.pk), first.lease)
        first.lease.record_committed()
        with pytest.raises(StaleFencingToken) as caught, transaction.atomic():
            FencedThing.objects.create(name="written by the stale holder")
            advance_fence(FencedThing.objects.filter(pk=overtaken.pk), second.lease)
    first.finished(None)
    assert second.counter_is_behind(caught.value) is False  # a newer holder, not Redis
    second.refused(caught.value)

    assert events(f"fenced-thing:{kept.pk}") == [("committed", 1, "")]
    assert events(stale_resource) == [("stale", 1, "a newer holder recorded token 2")]
    assert db_token(kept) == 1 and db_token(overtaken) == 2
    assert not FencedThing.objects.filter(name="written by the stale holder").exists()
    assert fence_lock.client.exists(lock_key(stale_resource)) == 0


def test_a_leased_attempt_refused_at_its_grant_is_recorded_and_raised(resource, fence_lock):
    held = fence_lock.acquire(resource, ttl=TTL, holder="bob")
    with pytest.raises(LockHeld):
        LeasedAttempt(resource, ttl=TTL, attempt=ALICE, lock=fence_lock)
    [(outcome, token, detail)] = events(resource)
    assert (outcome, token) == ("busy", held.token) and "bob" in detail
    assert held.release() is True


def test_a_leased_attempt_is_not_granted_inside_atomic(resource, redis_client):
    with pytest.raises(TransactionManagementError), transaction.atomic():
        LeasedAttempt(resource, ttl=TTL, attempt=ALICE)
    assert redis_client.exists(lock_key(resource)) == 0
    assert events(resource) == []


def test_a_lease_fencing_its_row_twice_is_not_taken_for_a_counter_that_went_back(thing, resource):
    """Issue 35, point 5: mark started, call the outside, mark done, each in its own
    transaction under one lease. The second fence saw its own token on the row, was taken
    for a counter that went back, and ``run_fenced`` started a new epoch and ran the work
    (and its outside call) again."""
    called: list[int] = []

    def work(lease) -> str:
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            FencedThing.objects.filter(pk=thing.pk).update(name="started")
        called.append(lease.token)  # the outside call, between the two transactions
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            FencedThing.objects.filter(pk=thing.pk).update(name="done")
        return "done"

    assert run_fenced(resource, work, ttl=TTL, attempt=ALICE) == "done"

    assert called == [1]  # once: no second run, no second call
    assert current_epoch(resource) == 0  # no epoch started for a counter "behind"
    assert events(resource) == [("committed", 1, "")]
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("done", 1)


# --- the audit row in the fence's statement ----------------------------------------------

AUDIT_IN_THE_FENCE = 'audited AS (INSERT INTO "locking_fenceevent"'


def audit_statements(queries) -> tuple[int, int]:
    """How many statements inserted an audit row with the fence, and on their own."""
    sql = [query["sql"] for query in queries.captured_queries]
    fused = sum(AUDIT_IN_THE_FENCE in statement for statement in sql)
    alone = sum(statement.startswith('INSERT INTO "locking_fenceevent"') for statement in sql)
    return fused, alone


@pytest.mark.parametrize("record", [False, True], ids=["without", "with record_committed"])
def test_the_fence_writes_the_attempts_audit_row_in_its_own_statement(thing, resource, record):
    """Issue 48, item 1: one statement fewer per commit, whether or not the work calls
    ``record_committed()`` (which then writes nothing), and nothing after the commit."""

    def work(lease) -> int:
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            FencedThing.objects.filter(pk=thing.pk).update(name="fixed")
            if record:
                lease.record_committed()
        return lease.token

    with CaptureQueriesContext(connection) as queries:
        assert run_fenced(resource, work, ttl=TTL, attempt=ALICE) == 1

    assert audit_statements(queries) == (1, 0)
    sql = [query["sql"] for query in queries.captured_queries]
    assert sql[-1] == "COMMIT"  # nothing recorded after the work's transaction
    assert events(resource) == [("committed", 1, "")]
    event = FenceEvent.objects.get()
    assert (event.actor, event.operation, event.scope, event.ip) == (
        "alice",
        "assign_vendor",
        "org:1",
        "192.0.2.7",
    )


@dataclass
class Done:
    outcome: Outcome = Outcome.ALREADY_DONE


def test_already_done_after_the_fence_updates_the_row_the_fence_wrote(thing, resource):
    def work(lease) -> Done:
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            lease.record_committed(Outcome.ALREADY_DONE)
            lease.record_committed(Outcome.ALREADY_DONE)  # again: nothing more
        return Done()

    with CaptureQueriesContext(connection) as queries:
        run_fenced(resource, work, ttl=TTL, attempt=ALICE)

    assert audit_statements(queries) == (1, 0)
    sql = [query["sql"] for query in queries.captured_queries]
    assert sum(statement.startswith('UPDATE "locking_fenceevent"') for statement in sql) == 1
    assert events(resource) == [("already_done", 1, "")]


def test_a_result_that_says_already_done_updates_the_committed_row_after(thing, resource):
    """A work that does not call ``record_committed``: its committed row is corrected."""

    def work(lease) -> Done:
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
        return Done()

    run_fenced(resource, work, ttl=TTL, attempt=ALICE)

    assert events(resource) == [("already_done", 1, "")]


@pytest.mark.parametrize("record", [False, True], ids=["without", "with record_committed"])
def test_a_refusal_after_the_fence_leaves_one_row_the_refusal(thing, resource, record):
    """The fence's row rolls back with the work; the refusal is recorded outside, once."""

    class Refused(Exception):
        outcome = Outcome.CONFLICT

    def work(lease):
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            if record:
                lease.record_committed()
            raise Refused("changed since viewed")

    with pytest.raises(Refused):
        run_fenced(resource, work, ttl=TTL, attempt=ALICE)

    assert events(resource) == [("conflict", 1, "changed since viewed")]
    assert db_token(thing) == 0


def test_a_fence_rolled_back_in_a_savepoint_leaves_the_row_to_be_recorded_after(thing, resource):
    """The fence's row went with its savepoint (as ``run_together``'s refused attempt's):
    the attempt is recorded after the commit, once, though the lease fenced another row of
    its resource, and called ``record_committed``, in the same transaction."""
    other = FencedThing.objects.create(name="Broken gate")

    def work(lease) -> int:
        with transaction.atomic():
            with pytest.raises(ZeroDivisionError), transaction.atomic():
                advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
                1 / 0  # noqa: B018 - the savepoint's rollback
            advance_fence(FencedThing.objects.filter(pk=other.pk), lease)
            FencedThing.objects.filter(pk=other.pk).update(name="fixed")
            lease.record_committed()
        return lease.token

    with CaptureQueriesContext(connection) as queries:
        run_fenced(resource, work, ttl=TTL, attempt=ALICE)

    assert audit_statements(queries) == (1, 1)  # the fence's (rolled back), then after
    assert events(resource) == [("committed", 1, "")]
    assert (db_token(thing), db_token(other)) == (0, 1)


def test_a_work_of_two_transactions_refused_in_the_second_keeps_one_row_the_refusal(
    thing, resource
):
    """Mark started, call out, mark done: the first transaction's row, committed, says how
    the attempt ended (one row per attempt, as when it was written after the work)."""

    class CallFailed(Exception):
        outcome = Outcome.FAILED

    def work(lease):
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            FencedThing.objects.filter(pk=thing.pk).update(name="started")
        assert events(resource) == [("committed", 1, "")]  # the first transaction's
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            raise CallFailed("the outside answered 503")

    with pytest.raises(CallFailed):
        run_fenced(resource, work, ttl=TTL, attempt=ALICE)

    assert events(resource) == [("failed", 1, "the outside answered 503")]
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("started", 1)


def test_a_fence_outside_run_fenced_or_by_token_writes_no_audit_row(thing, resource, fence_lock):
    """``advance_fence`` keeps its contract for callers outside the runner; a work that
    fences with ``lease.fencing_token`` has its row recorded after the commit, as before."""
    with fence_lock.acquire(resource, ttl=TTL) as lease, transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
    assert events(resource) == []

    def by_token(lease) -> int:
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease.fencing_token)
        return lease.token

    with CaptureQueriesContext(connection) as queries:
        run_fenced(resource, by_token, ttl=TTL, attempt=ALICE)
    assert audit_statements(queries) == (0, 1)
    assert events(resource) == [("committed", 2, "")]


def test_insert_fenced_writes_the_attempts_audit_row_with_the_row_it_inserts(redis_client):
    """The create path: the row, its token and the audit row in one statement; a row that
    is there after all inserts neither, and the fence that follows writes the audit row."""
    existing = FencedThing.objects.create(name="there")
    attempts = [LeasedAttempt(f"fenced-thing:new-{n}", ttl=TTL, attempt=ALICE) for n in ("a", "b")]
    new = FencedThing(name="new")
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        assert insert_fenced(new, attempts[0].lease) is True
        attempts[0].lease.record_committed()
        assert insert_fenced(FencedThing(pk=existing.pk, name="x"), attempts[1].lease) is False
        assert FenceEvent.objects.count() == 1
        advance_fence(FencedThing.objects.filter(pk=existing.pk), attempts[1].lease)
        attempts[1].lease.record_committed()
    for attempt in attempts:
        attempt.finished(None)

    assert audit_statements(queries) == (3, 0)  # two inserts (one inserted), one fence
    assert events("fenced-thing:new-a") == [("committed", 1, "")]
    assert events("fenced-thing:new-b") == [("committed", 1, "")]
    assert FencedThing.objects.get(pk=new.pk).last_fence_token == 1
