"""The busiest hour's baseline (``bench.http_baseline``): each unfenced twin answers as the
real view does and writes what it writes, and leaves out only what it is the twin of: the
lease, the token and the audit row (the assignment, the month, the payment), or, for the
status change, the compare-and-swap."""

import pytest
from django.apps import apps

from charges.models import MonthlyChargeRun
from hoa.models import Complaint, ComplaintEvent
from locking.models import FenceEvent
from tests.charges_support import MONTH, MONTH_ARG
from tests.harness.registry import operations_removed
from tests.invoices_support import paid_keys
from tests.vendors_support import lock_keys
from vendors.models import VendorAssignment, VendorPayment

pytestmark = pytest.mark.django_db(transaction=True)

TWINS = "/bench/unfenced"


@pytest.fixture
def staff(client, alice, settings):
    """Alice on the bench's URL conf: the project's URLs and the twins. The test settings'
    third operation (tests/budgets) has no URLs there, so it is out while the test runs."""
    settings.ROOT_URLCONF = "bench.http_baseline"
    client.force_login(alice)
    with operations_removed(_of_the_tests) as removed:
        assert removed  # the operation is there to take out: the URL conf would miss it
        yield client


def _of_the_tests(operation) -> bool:
    return apps.get_app_config(operation.permission.partition(".")[0]).name.startswith("tests.")


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Dripping tap")


def test_the_status_twin_changes_a_status_the_page_no_longer_shows(staff, complaint):
    path = f"/orgs/maple-court/complaints/{complaint.pk}/status/"
    Complaint.objects.filter(pk=complaint.pk).update(status=Complaint.Status.RESOLVED)
    shown_open = {"from_status": "open", "to_status": "closed", "note": "A duplicate."}

    real = staff.post(path, shown_open)
    twin = staff.post(TWINS + path, shown_open)

    assert (real.status_code, twin.status_code) == (409, 303)
    complaint.refresh_from_db()
    assert complaint.status == Complaint.Status.CLOSED
    changes = ComplaintEvent.objects.filter(complaint=complaint, kind="status_changed")
    assert list(changes.values_list("from_status", "to_status")) == [("open", "closed")]


def test_the_generation_twin_bills_the_month_without_lease_token_or_audit(
    staff, maple, billing, redis_client
):
    response = staff.post(
        f"{TWINS}/orgs/maple-court/charges/{MONTH_ARG}/generate/", {"confirm": "yes"}
    )

    assert response.status_code == 303
    assert response["Location"] == f"/orgs/maple-court/charges/{MONTH_ARG}/"
    run = MonthlyChargeRun.objects.get(organization=maple, month=MONTH)
    assert (run.status, run.charge_count, run.charges.count()) == ("completed", 10, 10)
    assert run.last_fence_token == 0
    assert [call.idempotency_key for call in billing.accepted()] == [
        f"monthly-charges:{maple.pk}:{MONTH_ARG}"
    ]
    assert not FenceEvent.objects.exists()
    assert lock_keys(redis_client) == []


def test_the_assignment_twin_assigns_without_lease_token_or_audit(
    staff, complaint, pipe, dispatch, redis_client
):
    response = staff.post(
        f"{TWINS}/orgs/maple-court/complaints/{complaint.pk}/assign/", {"vendor": pipe.pk}
    )

    assert response.status_code == 303
    assert list(VendorAssignment.objects.values_list("complaint", "vendor", "active")) == [
        (complaint.pk, pipe.pk, True)
    ]
    complaint.refresh_from_db()
    assert (complaint.status, complaint.last_fence_token) == ("assigned", 0)
    assert len(dispatch.accepted()) == 1
    assert not FenceEvent.objects.exists()
    assert lock_keys(redis_client) == []


def test_the_payment_twin_pays_once_without_lease_token_or_audit(
    staff, approved, payments, redis_client
):
    path = f"{TWINS}/orgs/maple-court/invoices/{approved.pk}/pay/"

    response = staff.post(path, {"seen": approved.version})

    assert response.status_code == 303
    payment = VendorPayment.objects.get(invoice=approved)
    approved.refresh_from_db()
    assert (approved.status, approved.last_fence_token) == ("paid", 0)
    assert paid_keys(payments) == [(f"vendor-payment:invoice:{approved.pk}", payment.fence_token)]
    assert not FenceEvent.objects.exists()
    assert lock_keys(redis_client) == []
