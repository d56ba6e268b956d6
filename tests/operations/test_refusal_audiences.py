"""A refusal speaks to two audiences: staff (pages, admin messages) read people and what to
do; operators (commands, the audit) read tokens, the holder's host and pid, and seconds.

The choice is ``hoa.answers.table.Audience``: ``exc.message`` is staff's sentence,
``str(exc)`` the operators'.
"""

import socket
from datetime import date, timedelta
from types import SimpleNamespace

import pytest
from django.utils.text import capfirst

from charges.operations import GENERATION
from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LeaseRanOut,
    LockServiceDown,
    NotPermitted,
    OutcomeUnknown,
    Refusal,
    Superseded,
    sentence,
)
from hoa.answers.sentences import person_holding
from hoa.models import Complaint
from hoa.operations import operations
from locking import LockHeld, StaleFencingToken
from vendors import answers as vendor_answers
from vendors.exceptions import AlreadyAssigned
from vendors.models import VendorAssignment
from vendors.operations import ASSIGNMENT

MONTH = date(2026, 3, 1)
LEASE = timedelta(seconds=30)


def held_by(fence_lock, holder: str) -> LockHeld:
    """The ``LockHeld`` a second grant gets while ``holder`` holds the lease."""
    with (
        fence_lock.acquire("audiences:test", ttl=LEASE, holder=holder),
        pytest.raises(LockHeld) as busy,
    ):
        fence_lock.acquire("audiences:test", ttl=LEASE)
    return busy.value


@pytest.mark.parametrize(
    ("label", "person"),
    [
        ("alice on web-1 pid 42", "alice"),
        ("alice via cli:ops on cron-1 pid 7", "alice"),
        ("cli:ops on cron-1 pid 7", None),  # the operator at the shell
        ("system on web-1 pid 1", None),
        ("nightly-cron on cron-1 pid 9", None),  # a label, but no such user
        ("web-1 pid 42", None),  # an unlabelled process
        ("", None),
    ],
)
def test_person_holding_names_only_a_user(alice, label, person):
    assert person_holding(label) == person


def test_busy_tells_staff_the_persons_name_and_operators_the_holder_label(alice, maple, fence_lock):
    lock = held_by(fence_lock, "alice")

    exc = Busy.held(lock, operation=GENERATION, organization=maple, month=MONTH)

    assert exc.message == (
        "Another staff member (alice) is generating the charges for Maple Court, March 2026; "
        "this usually takes a few seconds."
    )
    operators = str(exc)
    assert operators.startswith(f"Another holder (alice on {socket.gethostname()} pid ")
    assert ") is generating the charges for Maple Court, March 2026; try again in " in operators
    assert operators.endswith(" seconds.")


def test_busy_by_a_process_that_is_no_person_tells_staff_another_worker(
    maple, complaint, fence_lock
):
    lock = held_by(fence_lock, "nightly-cron")

    charges = Busy.held(lock, operation=GENERATION, organization=maple, month=MONTH)
    vendors = Busy.held(lock, operation=ASSIGNMENT, complaint=complaint)

    assert charges.message.startswith("Another worker is generating the charges for Maple")
    assert vendors.message == (
        f"Another worker is assigning a vendor to complaint #{complaint.pk}; this usually "
        "takes a few seconds."
    )
    assert "nightly-cron on " in str(vendors)


def test_superseded_keeps_the_tokens_for_operators_only(maple):
    stale = StaleFencingToken(token=4, recorded=5)

    exc = Superseded.refused("r", stale, operation=GENERATION, organization=maple, month=MONTH)

    assert "token" not in exc.message
    assert exc.message.startswith("Someone else took over generating the charges for Maple")
    assert "A newer holder (token 5)" in str(exc) and "(token 4)" in str(exc)


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Leaking pipe")


def test_an_assignment_is_described_to_staff_by_person_and_to_operators_by_token(
    complaint, pipe, alice
):
    by_alice = VendorAssignment.objects.create(
        complaint=complaint, vendor=pipe, assigned_by=alice, actor_label="alice", fence_token=7
    )

    exc = AlreadyAssigned(complaint=complaint, winner=by_alice)

    assert exc.message.startswith(
        f"Complaint #{complaint.pk} already has a vendor: {pipe.name}, assigned by alice on "
    )
    assert "token" not in exc.message
    assert str(exc).endswith(" (token 7). Reassign to replace them.")
    by_shell = VendorAssignment(
        complaint=complaint, vendor=pipe, actor_label="cli:ops", fence_token=8
    )
    by_shell.assigned_at = by_alice.assigned_at
    assert ", assigned by an operator on " in vendor_answers.describe_assignment(by_shell)


def test_a_refusal_is_made_without_a_query_and_rendered_when_asked(
    alice, maple, fence_lock, django_assert_num_queries
):
    """Facts go in, sentences come out at the edge: making the refusal queries nothing;
    staff's sentence asks once who the holder is."""
    lock = held_by(fence_lock, "alice")

    with django_assert_num_queries(0):
        exc = Busy.held(lock, operation=GENERATION, organization=maple, month=MONTH)
    assert (exc.holder, exc.token, exc.resource) == (lock.holder, lock.token, lock.resource)
    with django_assert_num_queries(1):
        assert "(alice)" in exc.message


def _refusal_classes(base):
    for cls in base.__subclasses__():
        yield cls
        yield from _refusal_classes(cls)


def test_every_refusal_of_the_apps_has_a_voice():
    """Each app's answers module registers the sentences of its base error, so no refusal
    falls back to the frame's sentence of last resort. Every refusal written outside the
    frame's shared kinds is one of an app's, the apps only tests install included."""
    concrete = {cls for cls in _refusal_classes(Refusal) if cls.__module__ != Refusal.__module__}
    assert {cls.__module__.partition(".")[0] for cls in concrete} >= {"charges", "vendors", "hoa"}
    assert "tests.budgets.answers" in {cls.__module__ for cls in concrete}
    for cls in concrete:
        assert sentence.dispatch(cls) is not sentence.dispatch(Refusal), cls


# What each operation was doing, from its refusals' subject (``steps.subject``).
SUBJECTS = {
    "monthly-charges": lambda maple, complaint: {"organization": maple, "month": MONTH},
    "vendor-assignment": lambda maple, complaint: {"complaint": complaint},
    "vendor-payment": lambda maple, complaint: {"invoice": SimpleNamespace(pk=7)},
    "budget-approval": lambda maple, complaint: {"organization": maple, "year": 2027},
}


def _shared_refusals(operation, subject, lock) -> dict[str, Refusal]:
    facts = {"operation": operation, **subject}
    return {
        "busy": Busy.held(lock, **facts),
        "superseded": Superseded.refused("r", StaleFencingToken(token=4, recorded=5), **facts),
        "lease": LeaseRanOut(resource="r", token=4, reason="lease expired", **facts),
        "down": LockServiceDown(resource="r", reason="Error 111 connecting to redis-1", **facts),
        "failed": CallFailed(reason="HTTP 422", status=422, **facts),
        "unknown": OutcomeUnknown(reason="timed out", **facts),
    }


def test_the_frame_says_every_shared_refusal_of_every_operation_to_both_audiences(
    alice, maple, complaint, fence_lock
):
    """The shared kinds are said once, by the frame, in the words each operation declares:
    what it was doing and whom its call tells. Staff never read a token, a host or the
    seconds a lease has left; operators read them."""
    assert {operation.name for operation in operations()} == set(SUBJECTS)
    lock = held_by(fence_lock, "alice")
    host = socket.gethostname()
    for operation in operations():
        subject = SUBJECTS[operation.name](maple, complaint)
        said = _shared_refusals(operation, subject, lock)
        doing = operation.answers.doing(said["busy"])
        party = str(operation.answers.party)
        for kind, refusal in said.items():
            staff, operators = refusal.message, str(refusal)
            assert staff and operators and "nothing was done" not in staff, (kind, staff)
            assert "token" not in staff and host not in staff, (kind, staff)
            assert "redis-1" not in staff and "try again in" not in staff, (kind, staff)
            if kind != "unknown":
                assert doing[1:] in staff and doing[1:] in operators, (kind, staff)
        assert said["busy"].message.startswith(f"Another staff member (alice) is {doing};")
        assert f"(alice on {host} pid " in str(said["busy"])
        assert "(token 5)" in str(said["superseded"]) and "(token 4)" in str(said["superseded"])
        assert "lease expired" in str(said["lease"]) and party in said["lease"].message
        assert "redis-1" in str(said["down"])
        assert f"{party} did not accept it (HTTP 422); nothing was saved" in (
            said["failed"].message
        )
        assert said["unknown"].message.startswith(capfirst(party))
        denied = NotPermitted(actor="viewer", organization=maple, operation=operation)
        assert denied.message == str(denied)
        assert denied.message.startswith("viewer may not ") and "Maple Court" in denied.message
