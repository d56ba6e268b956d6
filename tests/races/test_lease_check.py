"""A holder whose lease ran out before its external call stops there (``lease.check()``).

Fencing is the safety; this saves the call. Each test holds the attempt before its check
with a real table lock taken on another connection (the attempt's read of the units, or
of the complaint, waits on it), lets the lease expire, then lets the attempt go on: it
must stop without calling billing or the vendor, write nothing, and say so.
"""

from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection

from charges.models import MonthlyChargeRun
from charges.operations import charge_resource
from charges.services import generate_monthly_charges
from hoa.answers.refusals import LeaseRanOut
from hoa.models import Complaint
from locking.keys import lock_key
from locking.models import FenceEvent
from tests.charges_support import MONTH, Worker, waiting_statements
from tests.harness.waiting import wait_until
from vendors.models import VendorAssignment
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def table_locked(table: str):
    """Hold ``table`` in ACCESS EXCLUSIVE mode on a connection of its own until the block
    ends: every read of it waits."""
    db = connection.settings_dict
    blocker = psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"])
    try:
        blocker.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
        yield
    finally:
        blocker.rollback()
        blocker.close()


def hold_until_the_lease_expires(redis_client, resource: str, statement: str) -> None:
    wait_until(lambda: waiting_statements(statement) == 1, what=f"the attempt to wait: {statement}")
    wait_until(lambda: not redis_client.exists(lock_key(resource)), what="the lease to expire")


def test_charges_stop_before_billing_when_the_lease_ran_out(
    maple, settings, http_stub, redis_client
):
    settings.BILLING_WEBHOOK_URL = http_stub.url_for("billing")
    settings.CHARGES_LOCK_TTL_SECONDS = 0.3
    with table_locked("hoa_unit"):
        attempt = Worker(
            lambda: generate_monthly_charges(organization=maple, month=MONTH, actor=None, via="t")
        )
        hold_until_the_lease_expires(
            redis_client, charge_resource(maple, MONTH), 'SELECT "hoa_unit"'
        )
    attempt.join()

    assert isinstance(attempt.error, LeaseRanOut)  # the callers' one except Refusal catches it
    assert attempt.error.operation.name == "monthly-charges"
    assert "stopped (token 1: " in str(
        attempt.error
    ) and ") before the billing system was told; nothing was sent or saved" in str(attempt.error)
    assert http_stub.received == []
    assert not MonthlyChargeRun.objects.completed().exists()
    event = FenceEvent.objects.get()
    assert (event.outcome, event.token) == ("lost", 1)


def test_an_assignment_stops_before_calling_the_vendor_when_the_lease_ran_out(
    maple, pipe, alice, settings, dispatch, redis_client
):
    complaint = Complaint.objects.create(organization=maple, title="Broken gate")
    settings.VENDOR_LOCK_TTL_SECONDS = 0.3
    with table_locked("vendors_vendorassignment"):
        attempt = Worker(lambda: assign_vendor(complaint=complaint, vendor=pipe, actor=alice))
        hold_until_the_lease_expires(
            redis_client, assignment_resource(complaint.pk), 'SELECT "hoa_complaint"'
        )
    attempt.join()

    assert isinstance(attempt.error, LeaseRanOut)
    assert attempt.error.operation.name == "vendor-assignment"
    assert dispatch.received == []
    assert not VendorAssignment.objects.exists()
    event = FenceEvent.objects.get()
    assert (event.outcome, event.token) == ("lost", 1)


def test_a_live_lease_passes_the_check(maple, settings, http_stub):
    """Control: with the lease alive the same path bills and commits."""
    settings.BILLING_WEBHOOK_URL = http_stub.url_for("billing")
    settings.CHARGES_LOCK_TTL_SECONDS = 30
    result = generate_monthly_charges(organization=maple, month=MONTH, actor=None, via="t")
    assert result.committed and len(http_stub.received) == 1
