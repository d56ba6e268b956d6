"""The fault suite's checker of the rules between a complaint's operations
(tests/faults/checker.py, ``_check_complaint_rules``), fed hand-made histories it must
reject, one per rule, and the consistent one it must accept.

The nemesis (scenario 10) mixes status changes (closes and reopens among them) with vendor
assignments on a few hot complaints; these tests show that what it checks afterwards
would see each way the rules can break.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from hoa.models import Complaint, ComplaintEvent
from tests.faults.checker import check_history
from tests.faults.clients import Op
from vendors.models import VendorAssignment

pytestmark = pytest.mark.django_db

S = Complaint.Status
T0 = timezone.now() - timedelta(hours=1)


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Gate", status=S.OPEN)


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def told(kind, user, *, start, end, verdict="done", **facts) -> Op:
    op = Op(kind=kind, org="maple-court", org_id=0, user=user, verdict=verdict, **facts)
    op.started, op.ended = at(start).timestamp(), at(end).timestamp()
    return op


def assignment(complaint, vendor, user, *, seconds, until=None, because="", token=1):
    return VendorAssignment.objects.create(
        complaint=complaint,
        vendor=vendor,
        assigned_by=user,
        fence_token=token,
        assigned_at=at(seconds),
        active=until is None,
        deactivated_at=at(until) if until is not None else None,
        ended_because=because,
    )


def event(complaint, user, seen, to, *, seconds):
    return ComplaintEvent.objects.create(
        complaint=complaint,
        kind="status_changed",
        from_status=seen,
        to_status=to,
        actor=user,
        actor_label=user.username,
        at=at(seconds),
    )


def rules(complaint, ops) -> list[str]:
    complaint.refresh_from_db()
    return [
        line for line in check_history(ops, received=[], units={}) if line.startswith("complaint ")
    ]


def consistent_history(complaint, pipe, alice):
    """Assigned, in progress, closed (ending the vendor), reopened: every change told."""
    assignment(complaint, pipe, alice, seconds=10, until=30, because="closed")
    event(complaint, alice, S.OPEN, S.ASSIGNED, seconds=10)
    event(complaint, alice, S.ASSIGNED, S.IN_PROGRESS, seconds=20)
    event(complaint, alice, S.IN_PROGRESS, S.CLOSED, seconds=30)
    event(complaint, alice, S.CLOSED, S.OPEN, seconds=40)
    Complaint.objects.filter(pk=complaint.pk).update(status=S.OPEN)
    return [
        told("assign", "alice", start=9, end=11, complaint=complaint.pk, vendor=pipe.pk),
        told("status", "alice", start=19, end=21, complaint=complaint.pk,
             status_from=S.ASSIGNED, status_to=S.IN_PROGRESS),
        told("status", "alice", start=29, end=31, complaint=complaint.pk,
             status_from=S.IN_PROGRESS, status_to=S.CLOSED),
        told("status", "alice", start=39, end=41, complaint=complaint.pk,
             status_from=S.CLOSED, status_to=S.OPEN),
    ]  # fmt: skip


def test_a_consistent_history_has_no_violation(complaint, pipe, alice):
    assert rules(complaint, consistent_history(complaint, pipe, alice)) == []


def test_closed_with_a_vendor_still_active_is_a_violation(complaint, pipe, alice):
    ops = consistent_history(complaint, pipe, alice)
    VendorAssignment.objects.update(active=True, deactivated_at=None, ended_because="")
    Complaint.objects.filter(pk=complaint.pk).update(status=S.CLOSED)
    ComplaintEvent.objects.filter(to_status=S.OPEN, from_status=S.CLOSED).delete()
    ops.pop()
    found = rules(complaint, ops)
    assert any("closed with assignment" in line for line in found), found
    assert any("stayed active through the close" in line for line in found), found


def test_a_vendor_assigned_while_it_was_closed_is_a_violation(complaint, pipe, green, alice):
    ops = consistent_history(complaint, pipe, alice)
    assignment(complaint, green, alice, seconds=35, until=36, because="replaced", token=2)
    ops.append(told("assign", "alice", start=34, end=36, complaint=complaint.pk, vendor=green.pk))
    found = rules(complaint, ops)
    assert any("were made while it was closed" in line for line in found), found


def test_in_progress_without_an_active_vendor_is_a_violation(complaint, alice):
    event(complaint, alice, S.RESOLVED, S.IN_PROGRESS, seconds=5)
    Complaint.objects.filter(pk=complaint.pk).update(status=S.IN_PROGRESS)
    op = told("status", "alice", start=4, end=6, complaint=complaint.pk,
              status_from=S.RESOLVED, status_to=S.IN_PROGRESS)  # fmt: skip
    found = rules(complaint, [op])
    assert any("in_progress without an active vendor" in line for line in found), found
    assert any("made it in_progress with no vendor active" in line for line in found), found


def test_an_event_nobody_was_told_of_and_a_change_without_its_event_are_violations(
    complaint, pipe, alice
):
    ops = consistent_history(complaint, pipe, alice)
    ops[1].verdict = "refused"  # told refused, yet its event is there
    ComplaintEvent.objects.filter(to_status=S.OPEN, from_status=S.CLOSED).delete()  # told done
    Complaint.objects.filter(pk=complaint.pk).update(status=S.CLOSED)
    found = rules(complaint, ops)
    assert any("has no client told it was done (told: refused)" in line for line in found), found
    assert any("closed to open was done; no event of it" in line for line in found), found


def test_a_timeline_out_of_commit_order_is_a_violation(complaint, pipe, alice):
    ops = consistent_history(complaint, pipe, alice)
    # The close committed before the reopen (its id is lower) but is stamped after it.
    ComplaintEvent.objects.filter(to_status=S.CLOSED).update(at=at(45))
    ops[2].ended = at(46).timestamp()
    found = rules(complaint, ops)
    assert any("not the order the events committed in" in line for line in found), found
