"""assign_vendor: validation before the lease, the dispatch call, the fenced transaction."""

from datetime import timedelta

import pytest
from django.db import connection

from hoa.answers.refusals import Busy, CallFailed, NotPermitted, OutcomeUnknown
from hoa.jobs.settling import SETTLE_VIA, settle_outside_calls
from hoa.models import AccessDenial, Complaint, OutsideCall
from locking.models import FenceEvent
from tests.harness.pg import round_trips
from tests.vendors_support import (
    active_assignments,
    active_vendor,
    cancellations,
    dispatch_of,
    dispatches,
    events_of,
    lock_keys,
    state_of,
    vendor_with_contract,
)
from vendors.dispatch import idempotency_key
from vendors.exceptions import AlreadyAssigned, ChangedSinceViewed, ContractNotActive
from vendors.models import VendorAssignment
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

# run_fenced opens its own transactions: tests that reach it cannot run inside one. Refusals
# made before the lease run inside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)
before_the_lease = pytest.mark.django_db


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, unit=maple.units.first(), title="Leak")


def test_first_assignment_commits_with_the_lease_token_and_dispatches_once(
    complaint, pipe, alice, dispatch
):
    result = assign_vendor(complaint=complaint, vendor=pipe, actor=alice, ip="10.0.0.7")

    assert (result.outcome, result.token, result.replaced, result.dispatched) == (
        "committed",
        1,
        None,
        True,
    )
    assignment = VendorAssignment.objects.get()
    assert (assignment.vendor, assignment.active, assignment.fence_token) == (pipe, True, 1)
    assert (assignment.assigned_by, assignment.actor_label) == (alice, "alice")
    complaint.refresh_from_db()
    assert complaint.last_fence_token == 1
    [call] = dispatch.received
    assert call.token == 1
    assert call.idempotency_key == f"vendor-assignment:{complaint.pk}:{pipe.pk}:replacing:none"
    assert call.json["complaint"]["id"] == complaint.pk
    assert call.json["vendor"] == {
        "id": pipe.pk,
        "name": "Pipe Pros",
        "trade": "plumbing",
        "email": pipe.email,
    }
    assert call.json["organization"]["slug"] == "maple-court"
    assert call.json["replacing"] is None
    event = FenceEvent.objects.get()
    assert (event.resource, event.outcome, event.token, event.actor, event.ip) == (
        assignment_resource(complaint.pk),
        "committed",
        1,
        "alice",
        "10.0.0.7",
    )
    assert (event.scope, event.operation) == (
        f"org:{complaint.organization_id}",
        "vendor-assignment",
    )


def test_repeating_the_same_vendor_is_already_done_without_a_second_dispatch(
    complaint, pipe, alice, dispatch, redis_client
):
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    again = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    assert (again.outcome, not again.committed, again.assignment.pk) == (
        "already_done",
        True,
        first.assignment.pk,
    )
    assert len(dispatch.received) == 1
    assert VendorAssignment.objects.count() == 1
    assert events_of(complaint) == [("committed", 1), ("already_done", 2)]
    assert lock_keys(redis_client) == [f"fence:{{{assignment_resource(complaint.pk)}}}"]


def test_another_vendor_without_reassign_is_refused_naming_the_winner_and_not_dispatched(
    complaint, pipe, green, alice, dispatch, redis_client
):
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    before = state_of(complaint, redis_client)

    with pytest.raises(AlreadyAssigned) as refused:
        assign_vendor(complaint=complaint, vendor=green, actor=alice)

    assert refused.value.winner.pk == first.assignment.pk
    assert refused.value.winner.vendor == pipe
    assert state_of(complaint, redis_client) == before  # the fence advance rolled back too
    assert len(dispatch.received) == 1
    event = FenceEvent.objects.order_by("-id").first()
    assert (event.outcome, event.token) == ("conflict", 2)  # what happened: another won
    assert "already has a vendor: Pipe Pros, assigned by alice" in event.detail


def test_reassign_deactivates_the_previous_assignment_and_dispatches_the_replacement(
    complaint, pipe, green, alice, dispatch
):
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    second = assign_vendor(
        complaint=complaint,
        vendor=green,
        actor=alice,
        reassign=True,
        replacing=first.assignment,
    )

    assert (second.outcome, second.token, second.replaced.pk) == (
        "committed",
        2,
        first.assignment.pk,
    )
    old, new = VendorAssignment.objects.order_by("fence_token")
    assert (old.vendor, old.active, old.fence_token) == (pipe, False, 1)
    assert old.deactivated_at == new.assigned_at
    assert (new.vendor, new.active, new.fence_token) == (green, True, 2)
    assert dispatch.received[1].idempotency_key == idempotency_key(
        complaint_id=complaint.pk, vendor_id=green.pk, replacing_id=first.assignment.pk
    )
    assert dispatch.received[1].json["replacing"] == {
        "assignment": first.assignment.pk,
        "vendor": pipe.pk,
    }
    assert [c.token for c in dispatch.received] == [1, 2]


def test_a_reassignment_makes_at_most_seven_database_round_trips(
    complaint, pipe, green, alice, django_assert_max_num_queries
):
    # The actor's membership and permissions are known by now (as after a view's checks):
    # contract, the claim (committed on its own before the dispatch call), look, BEGIN,
    # the fence with the audit row (one statement), the compare-and-swap that deactivates
    # the assignment the caller saw and inserts the new one (reading the complaint's
    # status), COMMIT. Counted twice: as Django logs statements, and as waits on the wire.
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    with django_assert_max_num_queries(7), round_trips(connection) as trips:
        result = assign_vendor(
            complaint=complaint,
            vendor=green,
            actor=alice,
            reassign=True,
            replacing=first.assignment,
        )

    assert trips.count == 7
    assert (result.outcome, result.replaced.pk) == ("committed", first.assignment.pk)
    assert (result.replaced.active, result.assignment.vendor) == (False, green)
    assert result.assignment.fence_token == first.token + 1
    assert [
        a.vendor for a in VendorAssignment.objects.filter(complaint=complaint, active=True)
    ] == [green]


def test_a_first_assignment_makes_at_most_nine_database_round_trips(
    complaint, maple, pipe, alice, django_assert_max_num_queries
):
    # As above, the actor's checks already made (on another complaint). A new complaint's
    # first grant records its first fence epoch; then: contract, epoch, the claim, look,
    # BEGIN, the fence with the audit row, the conditional insert (no active assignment;
    # reading the complaint's status), the status change with its event (one statement),
    # COMMIT.
    other = Complaint.objects.create(organization=maple, unit=maple.units.first(), title="Gate")
    assign_vendor(complaint=other, vendor=pipe, actor=alice)

    with django_assert_max_num_queries(9), round_trips(connection) as trips:
        result = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    assert trips.count == 9
    assert (result.outcome, result.token, result.replaced) == ("committed", 1, None)
    assert Complaint.objects.get(pk=complaint.pk).status == "assigned"
    [event] = complaint.events.filter(kind="status_changed")
    assert (event.from_status, event.to_status, event.actor, event.actor_label) == (
        "open",
        "assigned",
        alice,
        "alice",
    )
    assert event.detail == "Pipe Pros assigned."
    assert [a.pk for a in active_assignments(complaint)] == [result.assignment.pk]


def test_a_reassignment_whose_seen_assignment_was_replaced_meanwhile_writes_nothing(
    complaint, pipe, green, alice
):
    # The compare-and-swap matches nothing: the state is read and answered as before.
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    second = assign_vendor(
        complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=first
    ).assignment
    tokens = Complaint.objects.get(pk=complaint.pk).last_fence_token

    with pytest.raises(ChangedSinceViewed):
        assign_vendor(complaint=complaint, vendor=pipe, actor=alice, reassign=True, replacing=first)

    active = VendorAssignment.objects.filter(complaint=complaint, active=True)
    assert [a.pk for a in active] == [second.pk]
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == tokens


def test_reassigning_an_assignment_already_replaced_is_refused_without_calling_the_vendor(
    complaint, maple, pipe, green, alice, dispatch, redis_client
):
    shown = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    # Someone else replaces Pipe Pros first; this caller still has Pipe Pros on its page.
    now = assign_vendor(
        complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=shown
    ).assignment
    bright = active_vendor("Bright Spark", maple)
    before = state_of(complaint, redis_client)

    with pytest.raises(ChangedSinceViewed) as refused:
        assign_vendor(
            complaint=complaint, vendor=bright, actor=alice, reassign=True, replacing=shown
        )

    assert (refused.value.expected.pk, refused.value.current.pk) == (shown.pk, now.pk)
    assert refused.value.current.vendor == green
    # The look before calling saw the change: the vendor was not told, so nothing to cancel.
    assert (refused.value.told_in_vain, refused.value.cancellation) == (None, "")
    assert state_of(complaint, redis_client) == before  # the fence advance rolled back too
    assert [call.token for call in dispatch.received] == [1, 2]
    assert cancellations(dispatch) == []
    assert events_of(complaint) == [("committed", 1), ("committed", 2), ("conflict", 3)]
    assert FenceEvent.objects.get(outcome="conflict").detail == (
        f"Complaint #{complaint.pk} changed since you looked: Evergreen is now assigned "
        "(token 2); nothing was saved. Run again to replace it knowingly."
    )


def test_reassigning_to_the_vendor_someone_else_just_assigned_is_already_done(
    complaint, pipe, green, alice, dispatch
):
    shown = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    theirs = assign_vendor(
        complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=shown
    ).assignment

    mine = assign_vendor(
        complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=shown
    )

    assert (mine.outcome, mine.assignment.pk) == ("already_done", theirs.pk)
    assert len(dispatch.received) == 2
    assert events_of(complaint) == [("committed", 1), ("committed", 2), ("already_done", 3)]


@before_the_lease
def test_reassign_without_naming_what_it_replaces_is_a_programming_error(
    complaint, pipe, alice, redis_client
):
    with pytest.raises(TypeError, match="needs replacing="):
        assign_vendor(complaint=complaint, vendor=pipe, actor=alice, reassign=True)

    assert lock_keys(redis_client) == []
    assert FenceEvent.objects.count() == 0


@before_the_lease
def test_replacing_an_assignment_of_another_complaint_is_refused_before_the_lease(
    complaint, maple, pipe, green, alice, redis_client
):
    other = Complaint.objects.create(organization=maple, title="Other")
    elsewhere = VendorAssignment.objects.create(complaint=other, vendor=pipe, fence_token=1)

    with pytest.raises(ValueError, match=f"not one of complaint {complaint.pk}'s"):
        assign_vendor(
            complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=elsewhere
        )

    assert lock_keys(redis_client) == []
    assert FenceEvent.objects.count() == 0


def test_reassigning_back_to_an_earlier_vendor_gets_a_new_idempotency_key(
    complaint, pipe, green, alice, dispatch
):
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    second = assign_vendor(
        complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=first
    ).assignment
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice, reassign=True, replacing=second)

    keys = [call.idempotency_key for call in dispatch.received]
    assert len(set(keys)) == 3
    assert [a.vendor for a in active_assignments(complaint)] == [pipe]
    assert VendorAssignment.objects.count() == 3


def test_failed_dispatch_writes_nothing_and_records_failed(
    complaint, pipe, alice, dispatch, redis_client
):
    dispatch.status = 422
    before = state_of(complaint, redis_client)

    with pytest.raises(CallFailed) as failed:
        assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    assert (failed.value.status, failed.value.reason) == (422, "HTTP 422")
    after = state_of(complaint, redis_client)
    assert (after.assignments, after.fence_token) == (before.assignments, before.fence_token)
    assert lock_keys(redis_client) == [f"fence:{{{assignment_resource(complaint.pk)}}}"]
    assert events_of(complaint) == [("failed", 1)]

    # The retry of the same change carries the same key: the receiver performs it once.
    dispatch.status = 200
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    first_try, retry = dispatch.received
    assert first_try.idempotency_key == retry.idempotency_key
    assert (first_try.token, retry.token) == (1, 2)


def test_dispatch_is_skipped_when_no_url_is_configured(complaint, pipe, alice, settings):
    settings.VENDOR_DISPATCH_URL = ""

    result = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    assert (result.outcome, result.dispatched) == ("committed", False)
    assert VendorAssignment.objects.get().fence_token == 1


def test_a_held_lease_answers_busy_naming_the_holder_and_writes_nothing(
    complaint, pipe, alice, dispatch, fence_lock, redis_client
):
    holder = fence_lock.acquire(
        assignment_resource(complaint.pk), ttl=timedelta(seconds=10), holder="bob"
    )
    before = state_of(complaint, redis_client)

    with pytest.raises(Busy) as busy:
        assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    assert busy.value.holder.startswith("bob on ")
    assert state_of(complaint, redis_client) == before
    assert dispatch.received == []
    assert events_of(complaint) == [("busy", 1)]
    holder.release()


@before_the_lease
@pytest.mark.parametrize(
    ("starts_in_days", "ends_in_days", "fact"),
    [(-60, -1, "ended"), (1, 60, "starts later"), (-1, -1, "ended")],
    ids=["ended-yesterday", "starts-tomorrow", "one-day-contract-yesterday"],
)
def test_a_contract_not_covering_today_is_refused_before_anything_is_locked(
    complaint, alice, dispatch, redis_client, maple, starts_in_days, ends_in_days, fact
):
    vendor = vendor_with_contract(
        "Bright Spark", maple, starts_in_days=starts_in_days, ends_in_days=ends_in_days
    )
    before = state_of(complaint, redis_client)

    with pytest.raises(ContractNotActive) as refused:
        assign_vendor(complaint=complaint, vendor=vendor, actor=alice)

    assert refused.value.starts_later is (fact == "starts later")
    assert refused.value.contract.vendor == vendor
    assert state_of(complaint, redis_client) == before
    assert before.redis_keys == ()
    assert dispatch.received == []
    assert FenceEvent.objects.count() == 0


def test_a_contract_covering_today_on_its_last_day_is_accepted(complaint, alice, maple):
    vendor = vendor_with_contract("Last Day", maple, starts_in_days=-10, ends_in_days=0)

    assert assign_vendor(complaint=complaint, vendor=vendor, actor=alice).outcome == "committed"


@before_the_lease
def test_a_vendor_contracted_only_with_another_association_is_refused(
    complaint, alice, oak, redis_client
):
    oak_vendor = active_vendor("Oakline", oak)
    before = state_of(complaint, redis_client)

    with pytest.raises(ContractNotActive) as refused:
        assign_vendor(complaint=complaint, vendor=oak_vendor, actor=alice)

    assert refused.value.contract is None
    assert state_of(complaint, redis_client) == before


@before_the_lease
@pytest.mark.parametrize("persona", ["mallory", "nobody", "viewer"])
def test_an_actor_who_is_not_permitted_staff_of_the_association_is_refused(
    request, complaint, pipe, dispatch, redis_client, persona
):
    actor = request.getfixturevalue(persona)
    before = state_of(complaint, redis_client)

    with pytest.raises(NotPermitted):
        assign_vendor(complaint=complaint, vendor=pipe, actor=actor, ip="10.0.0.9")

    assert state_of(complaint, redis_client) == before
    assert before.redis_keys == ()
    assert dispatch.received == []
    # Refused before any lease: recorded with every other refusal, not as a fenced attempt.
    assert not FenceEvent.objects.exists()
    denial = AccessDenial.objects.get()
    assert (denial.reason, denial.resource, denial.actor, denial.ip, denial.organization) == (
        "permission",
        assignment_resource(complaint.pk),
        persona,
        "10.0.0.9",
        complaint.organization,
    )


def test_a_superuser_and_the_shell_operator_may_assign(complaint, pipe, green, root):
    by_root = assign_vendor(complaint=complaint, vendor=pipe, actor=root)
    by_shell = assign_vendor(
        complaint=complaint,
        vendor=green,
        actor=None,
        reassign=True,
        replacing=by_root.assignment,
        via="cli:deploy",
    )

    assert by_root.assignment.actor_label == "root"
    assert (by_shell.assignment.assigned_by, by_shell.assignment.actor_label) == (
        None,
        "cli:deploy",
    )


def test_a_dispatch_whose_answer_is_lost_is_unknown_and_settled_by_doing_it(
    complaint, pipe, alice, dispatch, settings
):
    """The dispatch service took the call and its answer timed out: not "nothing was
    saved". Settling makes the same assignment by the same key: recorded, sent once."""
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 0.5
    dispatch.lost_delay = 2
    dispatch.lose_answer = lambda request: "timeout"
    with pytest.raises(OutcomeUnknown) as unknown:
        assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    assert unknown.value.message.startswith("The dispatch service did not say whether it acted")
    assert VendorAssignment.objects.filter(complaint=complaint).count() == 0
    assert events_of(complaint) == [("unknown", 1)]
    key = idempotency_key(complaint_id=complaint.pk, vendor_id=pipe.pk, replacing_id=None)
    assert OutsideCall.objects.get().idempotency_key == key

    dispatch.lose_answer = None
    assert settle_outside_calls().settled == 1
    [active] = VendorAssignment.objects.filter(complaint=complaint, active=True)
    assert (active.vendor, active.actor_label) == (pipe, SETTLE_VIA)
    assert {call.idempotency_key for call in dispatches(dispatch)} == {key}
    assert cancellations(dispatch) == []
    assert OutsideCall.objects.get().settlement == OutsideCall.Settlement.DONE


def test_a_dispatch_left_unknown_while_staff_chose_another_vendor_is_taken_back(
    complaint, pipe, green, alice, dispatch, settings
):
    """Staff picked Evergreen while Pipe Pros's dispatch was still unknown: settling cannot
    record Pipe Pros any more (the complaint has a vendor), so it takes Pipe Pros back."""
    dispatch.lose_answer = lambda request: "close" if dispatch_of(pipe)(request) else None
    with pytest.raises(OutcomeUnknown):
        assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    dispatch.lose_answer = None
    assign_vendor(complaint=complaint, vendor=green, actor=alice)

    assert settle_outside_calls().settled == 1

    [active] = VendorAssignment.objects.filter(complaint=complaint, active=True)
    assert active.vendor == green
    [cancel] = cancellations(dispatch)
    assert cancel.json["vendor"]["id"] == pipe.pk
    assert cancel.idempotency_key == idempotency_key(
        complaint_id=complaint.pk, vendor_id=pipe.pk, replacing_id=None
    )
    settled = OutsideCall.objects.get()
    assert settled.settlement == OutsideCall.Settlement.TAKEN_BACK
    assert "cancellation sent (HTTP 200)" in settled.detail


def test_a_dispatch_refused_by_a_4xx_is_refused_and_nothing_is_left_to_settle(
    complaint, pipe, alice, dispatch
):
    dispatch.status = 400
    with pytest.raises(CallFailed):
        assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    assert not OutsideCall.objects.exists()
    assert events_of(complaint) == [("failed", 1)]
