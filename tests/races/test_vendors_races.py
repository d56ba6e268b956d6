"""Racing assignments: real threads with their own connections, forced interleavings.

Each test holds the dispatch call of a chosen attempt at a gate of the local HTTP stand-in,
so the interleaving it claims is the one that happens: the holder is provably inside its
external call (holding or having lost its lease) while the other attempt runs.
"""

import threading

import pytest

from hoa.answers.refusals import Busy, Superseded
from hoa.models import Complaint
from locking.epochs import first_token
from locking.models import FenceEvent
from tests.harness.waiting import wait_until
from tests.vendors_support import (
    WAIT,
    Worker,
    active_assignments,
    active_vendor,
    cancellations,
    dispatch_of,
    dispatches,
    events_of,
    wait_for_lease_to_expire,
)
from vendors.exceptions import AlreadyAssigned, ChangedSinceViewed
from vendors.models import VendorAssignment
from vendors.operations import assignment_resource
from vendors.selectors import active_assignment
from vendors.services import AssignmentResult, assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)


SHORT_TTL = 1.0  # seconds: outlives a grant, a look and a claim under load; expires mid-call


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Water in the basement")


def test_two_concurrent_assignments_of_different_vendors_never_both_succeed(
    complaint, pipe, green, alice, dispatch
):
    """The seed's required test: one succeeds, the other is told who holds the lease."""
    gate = dispatch.hold()  # every dispatch waits here until released
    barrier = threading.Barrier(2)
    workers = [
        Worker(
            lambda vendor=vendor: assign_vendor(complaint=complaint, vendor=vendor, actor=alice),
            barrier=barrier,
            name=vendor.name,
        )
        for vendor in (pipe, green)
    ]
    for worker in workers:
        worker.start()

    # One attempt won the lease and is inside its dispatch call, holding the lease...
    gate.wait_arrived(1)
    # ...while the other runs to its answer: the overlap is forced, not hoped for.
    wait_until(lambda: any(w.finished.is_set() for w in workers), what="the loser's answer")
    [loser] = [w for w in workers if w.finished.is_set()]
    [winner] = [w for w in workers if w is not loser]
    assert gate.arrived == 1  # the loser never called the vendor
    gate.release()

    won, lost = winner.outcome(), loser.outcome()
    assert isinstance(won, AssignmentResult)
    assert (won.outcome, won.token) == ("committed", 1)
    assert isinstance(lost, Busy)
    assert lost.holder.startswith("alice on ")
    assert lost.busy.token == 1  # the counter the winner was granted
    assert [a.vendor.name for a in active_assignments(complaint)] == [winner.name]
    assert VendorAssignment.objects.count() == 1
    assert len(dispatch.received) == 1
    assert sorted(events_of(complaint)) == [("busy", 1), ("committed", 1)]


def test_paused_holder_resuming_after_a_takeover_is_rejected_and_the_newer_assignment_stays(
    complaint, pipe, green, alice, dispatch, redis_client, settings
):
    settings.VENDOR_LOCK_TTL_SECONDS = SHORT_TTL
    # The dispatch service accepts A's call (token 1); its answer is what hangs.
    gate = dispatch.hold(dispatch_of(pipe), answered=True)
    paused = Worker(lambda: assign_vendor(complaint=complaint, vendor=pipe, actor=alice))
    paused.start()
    gate.wait_arrived(1)  # A is inside its dispatch call with token 1...
    wait_for_lease_to_expire(redis_client, complaint)  # ...and has outlived its lease

    # B saw no vendor: A has not committed.
    newer = assign_vendor(
        complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=None
    )
    gate.release()
    late = paused.outcome()

    assert (newer.outcome, newer.token) == ("committed", 2)
    assert isinstance(late, Superseded)
    assert (late.token, late.recorded) == (1, 2)
    [active] = active_assignments(complaint)
    assert (active.vendor, active.fence_token) == (green, 2)
    assert VendorAssignment.objects.count() == 1  # nothing of A's was written
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == 2
    assert sorted(call.token for call in dispatches(dispatch)) == [1, 2]
    assert events_of(complaint) == [("committed", 2), ("stale", 1)]
    # Pipe Pros heard of A's overtaken attempt: A takes it back, under A's key and token.
    [cancel] = cancellations(dispatch)
    assert (cancel.json["vendor"]["id"], cancel.token) == (pipe.pk, 1)
    assert (late.told_in_vain, late.cancellation) == (pipe, "cancellation sent (HTTP 200)")


@pytest.mark.parametrize("reassign", [True, False], ids=["reassign", "no-reassign"])
def test_an_older_holder_back_from_its_call_after_a_newer_ones_claim_is_refused(
    complaint, pipe, green, alice, dispatch, redis_client, settings, reassign
):
    """Both holders are inside their dispatch calls (tokens 1 and 2); the older one comes
    back first. It used to commit (1 > 0 passed the fence) and the newer one was refused
    at its state check, its vendor told in vain. The newer holder claimed before its call
    (hoa/fenced.py): the older one's commit is refused, and the newer one's vendor, the
    last one the dispatch service heard of, is the one assigned."""
    settings.VENDOR_LOCK_TTL_SECONDS = SHORT_TTL
    gate_a = dispatch.hold(dispatch_of(pipe))
    gate_b = dispatch.hold(dispatch_of(green))
    older = Worker(lambda: assign_vendor(complaint=complaint, vendor=pipe, actor=alice))
    older.start()
    gate_a.wait_arrived(1)
    wait_for_lease_to_expire(redis_client, complaint)
    seen = active_assignment(complaint)  # what the newer caller looks at: no vendor yet
    newer = Worker(
        lambda: assign_vendor(
            complaint=complaint, vendor=green, actor=alice, reassign=reassign, replacing=seen
        )
    )
    newer.start()
    gate_b.wait_arrived(1)  # both are inside their dispatch calls: tokens 1 and 2

    gate_a.release()
    first = older.outcome()  # back first: the newer holder's claim refuses it
    gate_b.release()
    second = newer.outcome()

    assert seen is None
    assert isinstance(first, Superseded)
    assert (first.token, first.recorded) == (1, 2)
    assert (second.outcome, second.token) == ("committed", 2)
    [active] = active_assignments(complaint)
    assert (active.vendor, active.fence_token) == (green, 2)
    assert VendorAssignment.objects.count() == 1  # nothing of the older holder's
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == 2
    assert sorted(events_of(complaint), key=lambda event: event[1]) == [
        ("stale", 1),
        ("committed", 2),
    ]
    assert [(call.json["vendor"]["id"], call.token) for call in dispatches(dispatch)] == [
        (pipe.pk, 1),
        (green.pk, 2),
    ]


@pytest.mark.parametrize("reassign", [True, False], ids=["reassign", "no-reassign"])
def test_a_newer_holder_claiming_after_an_older_commit_is_refused_by_the_state_check(
    complaint, pipe, green, alice, dispatch, reassign
):
    """Layer 4 holds the other order: the older holder committed before the newer one
    claimed. The newer one's look (under its claim) sees Pipe Pros, so it calls nobody,
    and its commit refuses it: without reassign a vendor is active; with reassign it
    decided when no vendor was, and must not replace one it never saw."""
    seen = active_assignment(complaint)  # the newer caller's page: no vendor yet
    won = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    lost = Worker(
        lambda: assign_vendor(
            complaint=complaint, vendor=green, actor=alice, reassign=reassign, replacing=seen
        )
    )
    lost.start()
    second = lost.outcome()

    assert (won.outcome, won.token) == ("committed", 1)
    if reassign:
        assert isinstance(second, ChangedSinceViewed)
        assert (second.expected, second.current.pk) == (None, won.assignment.pk)
    else:
        assert isinstance(second, AlreadyAssigned)
        assert second.winner.pk == won.assignment.pk
    assert second.told_in_vain is None  # its vendor was never called
    assert [call.token for call in dispatches(dispatch)] == [1]
    [active] = active_assignments(complaint)
    assert (active.vendor, active.fence_token) == (pipe, 1)


@pytest.mark.parametrize("before_loss", [1, 3], ids=["one-before", "three-before"])
def test_reassignment_after_redis_lost_its_data_succeeds_on_the_first_call(
    complaint, maple, pipe, green, alice, dispatch, redis_client, before_loss
):
    vendors = [pipe, green, active_vendor("Bright Spark", maple)]
    for number in range(before_loss):
        assign_vendor(
            complaint=complaint,
            vendor=vendors[number % 3],
            actor=alice,
            reassign=True,
            replacing=active_assignment(complaint),
        )
    recorded = Complaint.objects.get(pk=complaint.pk).last_fence_token
    assert recorded == before_loss
    calls_before = len(dispatch.received)

    redis_client.flushdb()  # Redis restarted without persistence: counter and lease gone
    target = vendors[before_loss % 3]
    result = assign_vendor(
        complaint=complaint,
        vendor=target,
        actor=alice,
        reassign=True,
        replacing=active_assignment(complaint),
    )

    # The grant saw the counter gone and started epoch 1 before the dispatch call.
    token = first_token(1) + 1
    assert (result.outcome, result.token) == ("committed", token)
    [active] = active_assignments(complaint)
    assert (active.vendor, active.fence_token) == (target, token)
    assert VendorAssignment.objects.count() == before_loss + 1
    assert [call.token for call in dispatch.received[calls_before:]] == [token]
    assert not FenceEvent.objects.filter(outcome="stale").exists()
    assert events_of(complaint)[-1:] == [("committed", token)]
    assert redis_client.get(f"fence:{{{assignment_resource(complaint.pk)}}}") == str(token).encode()


def test_two_reassignments_decided_against_the_same_assignment_exactly_one_commits(
    complaint, maple, pipe, green, alice, dispatch, redis_client, settings
):
    """Two staff members look at the complaint (Pipe Pros) and each replaces it: one with
    Evergreen, one with Bright Spark. The first holder is paused inside its dispatch call
    past its lease, so the second is granted a newer token, claims and calls its vendor
    too; then the first comes back. Its commit is refused (the second's claim is newer),
    its vendor gets the cancellation, and the second replaces Pipe Pros, as it decided:
    one commit, the newer one's."""
    settings.VENDOR_LOCK_TTL_SECONDS = SHORT_TTL
    bright = active_vendor("Bright Spark", maple)
    shown = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    gates = {vendor: dispatch.hold(dispatch_of(vendor)) for vendor in (green, bright)}
    looked = threading.Barrier(2)
    second_may_go = threading.Event()  # hold point: the first holder's lease has expired

    def reassign(vendor, *, wait_for=None):
        seen = active_assignment(complaint)  # what this person's page showed
        looked.wait(timeout=WAIT)  # both have looked before either acts
        if wait_for is not None:
            assert wait_for.wait(timeout=WAIT)
        return seen, assign_vendor(
            complaint=complaint, vendor=vendor, actor=alice, reassign=True, replacing=seen
        )

    first = Worker(lambda: reassign(green), name="first")
    second = Worker(lambda: reassign(bright, wait_for=second_may_go), name="second")
    first.start()
    second.start()

    gates[green].wait_arrived(1)  # the first holder is inside its call with token 2...
    wait_for_lease_to_expire(redis_client, complaint)  # ...and has outlived its lease
    second_may_go.set()
    gates[bright].wait_arrived(1)  # the second holder claimed token 3, told Bright Spark
    gates[green].release()
    lost = first.outcome()  # the older token comes back first: refused
    gates[bright].release()
    seen_second, won = second.outcome()

    assert isinstance(lost, Superseded)
    assert (lost.token, lost.recorded) == (2, 3)
    assert seen_second.pk == shown.pk
    assert (won.outcome, won.token, won.replaced.pk) == ("committed", 3, shown.pk)
    rows = VendorAssignment.objects.filter(complaint=complaint).order_by("pk")
    assert list(rows.values_list("vendor__name", "active", "fence_token")) == [
        ("Pipe Pros", False, 1),
        ("Bright Spark", True, 3),
    ]
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == 3
    assert sorted(events_of(complaint), key=lambda event: event[1]) == [
        ("committed", 1),
        ("stale", 2),
        ("committed", 3),
    ]
    calls = [(call.json["vendor"]["id"], call.token) for call in dispatches(dispatch)]
    assert calls == [(pipe.pk, 1), (green.pk, 2), (bright.pk, 3)]
    # Evergreen was told by the overtaken attempt: it is taken back.
    [cancel] = cancellations(dispatch)
    assert (cancel.json["vendor"]["id"], cancel.token) == (green.pk, 2)
    assert lost.told_in_vain == green
