"""The possible-duplicate flag is a rule over a set of rows ("no second copy of one bill
goes unflagged"): it is decided under one lock per vendor and association, never by a read
followed by an insert (issue 44, item 5, class a).

Two staff members record the same bill twice at once (the vendor sent it by post and by
email: same vendor, amount and date, two numbers). Before the lock, each looked for an
earlier copy, found none committed, and inserted: neither was flagged, both could be
approved with one click each and paid twice.
"""

import threading
from decimal import Decimal

import pytest
from django.db import connection, transaction

from tests.harness.waiting import wait_until
from tests.invoices_support import record
from tests.vendors_support import WAIT, Worker
from vendors import invoices
from vendors.models import Invoice

pytestmark = pytest.mark.django_db(transaction=True)


def _a_backend_waits_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return bool(cursor.fetchone()[0])


def _first_inside_an_open_transaction(target):
    """Run ``target`` in a worker inside a transaction held open (the hold point) until
    the returned event is set; return the worker once ``target`` has returned."""
    done, may_commit = threading.Event(), threading.Event()

    def held():
        with transaction.atomic():
            result = target()
            done.set()
            assert may_commit.wait(WAIT)
        return result

    worker = Worker(held, name="first")
    worker.start()
    assert done.wait(WAIT)
    return worker, may_commit


def _second_runs_or_waits(target) -> Worker:
    """Start ``target`` in a worker; return once it has finished or waits on a lock."""
    worker = Worker(target, name="second")
    worker.start()
    wait_until(
        lambda: worker.finished.is_set() or _a_backend_waits_on_a_lock(),
        what="the second recording to finish or wait on the first's lock",
    )
    return worker


def test_the_same_bill_recorded_twice_at_once_is_flagged_as_a_possible_duplicate(
    assignment, alice, bob
):
    """The first recording is held before its commit; the second (another number, the same
    vendor, amount and date) runs meanwhile. It must wait for the first and flag itself."""
    first, may_commit = _first_inside_an_open_transaction(
        lambda: record(assignment, alice, number="POST-1")
    )
    second = _second_runs_or_waits(lambda: record(assignment, bob, number="MAIL-1"))
    may_commit.set()
    original, copy = first.outcome(), second.outcome()

    assert isinstance(original, Invoice) and isinstance(copy, Invoice)
    flags = dict(Invoice.objects.values_list("number", "possible_duplicate_of"))
    assert flags == {"POST-1": None, "MAIL-1": original.pk}
    copy.refresh_from_db()
    assert copy.needs_duplicate_confirmation


def test_an_amount_changed_to_match_a_bill_recorded_meanwhile_is_flagged(assignment, alice, bob):
    """The other way in: an invoice's amount is changed to the amount of a bill being
    recorded at the same moment. Whichever commits second sees the other."""
    earlier = record(assignment, alice, number="A-1", amount=Decimal("99.00"))
    changing, may_commit = _first_inside_an_open_transaction(
        lambda: (
            invoices.change_amount(
                invoice=earlier, seen=1, amount=Decimal("250.00"), reason="Typo", actor=alice
            ).invoice
        )
    )
    recording = _second_runs_or_waits(lambda: record(assignment, bob, number="B-1"))
    may_commit.set()
    changed, recorded = changing.outcome(), recording.outcome()

    assert isinstance(changed, Invoice) and isinstance(recorded, Invoice)
    flags = dict(Invoice.objects.values_list("number", "possible_duplicate_of"))
    assert flags == {"A-1": None, "B-1": earlier.pk}
