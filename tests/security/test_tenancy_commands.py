"""Which association, as whom, for the commands and the batches behind them: one resolver
(``hoa.tenancy``) decides, and nothing it did not resolve is trusted.

mallory is staff of Oak Ridge only; every case here aims her at Maple Court.
"""

from datetime import date, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.month_start import generate_chunk
from hoa.models import AccessDenial, Complaint, Unit
from tests.harness.processes import run_manage
from tests.invoices_support import approve, assignment_of, record
from vendors.models import Invoice, VendorAssignment, VendorPayment
from vendors.payment_client import PAYMENT_ENDPOINT
from vendors.payment_run import pay_approved

pytestmark = pytest.mark.django_db(transaction=True)

TENANT = AccessDenial.Reason.TENANT


def call(*args: str) -> tuple[int, str]:
    """Run a command in this process: (exit status, its one line)."""
    out = StringIO()
    try:
        call_command(*args, stdout=out, stderr=StringIO())
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, out.getvalue().strip()


def due_today(maple, vendor, alice, bob, number: str, amount: str = "120.00") -> Invoice:
    today = timezone.localdate()
    invoice = record(
        assignment_of(maple, vendor, title=f"Work {number}"),
        alice,
        number=number,
        amount=Decimal(amount),
        issued_on=today - timedelta(days=10),
        due_on=today,
    )
    return approve(invoice, bob)


def tenant_denials() -> list[tuple[str, str, str]]:
    rows = AccessDenial.objects.filter(reason=TENANT).order_by("pk")
    return list(rows.values_list("actor", "organization__slug", "detail"))


def test_pay_approved_invoices_for_an_org_the_actor_is_not_staff_of_exits_1_and_pays_nothing(
    maple, pipe, alice, bob, mallory, subprocess_env, payments
):
    invoices = [
        due_today(maple, pipe, alice, bob, number=f"M-{n}", amount=f"1{n}0.00") for n in range(2)
    ]
    env = {
        **subprocess_env,
        "VENDOR_PAYMENT_URL": payments.url_for(PAYMENT_ENDPOINT),
        "LOG_LEVEL": "ERROR",
    }

    done = run_manage(
        "pay_approved_invoices", "--org", "maple-court", "--actor", "mallory", env=env
    )

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == 'CommandError: No organization "maple-court" for mallory.\n'
    assert not VendorPayment.objects.exists()
    assert payments.received == []
    assert {
        invoice.status for invoice in Invoice.objects.filter(pk__in=[i.pk for i in invoices])
    } == {Invoice.Status.APPROVED}
    [(actor, slug, detail)] = tenant_denials()
    assert (actor.split(" via ")[0], slug, detail) == (
        "mallory",
        "maple-court",
        "not staff of maple-court",
    )


def test_the_payment_run_pays_nothing_of_associations_its_actor_is_not_staff_of(
    maple, pipe, alice, bob, mallory, payments
):
    due_today(maple, pipe, alice, bob, number="M-1")

    run = pay_approved(organizations=[maple], actor=mallory, via="cli:test")

    assert (run.total, run.counts["paid"], run.failed) == (1, 0, 1)
    assert not VendorPayment.objects.exists()
    assert payments.received == []


def test_a_month_start_worker_generates_nothing_for_ids_its_actor_is_not_staff_of(
    maple, mallory, billing
):
    Unit.objects.create(organization=maple, label="1A", monthly_assessment=Decimal("100.00"))
    started = timezone.now()

    [outcome] = generate_chunk([maple.pk], date(2026, 3, 1), mallory.pk, "cli:test", started)

    assert outcome.kind == "denied"
    assert not MonthlyChargeRun.objects.filter(completed_at__isnull=False).exists()
    assert not MonthlyCharge.objects.exists()


def test_generate_monthly_charges_for_an_org_the_actor_is_not_staff_of_is_a_tenant_denial(
    maple, mallory, billing
):
    answer = call("generate_monthly_charges", "--org", "maple-court", "--actor", "mallory")

    assert answer == (1, 'No organization "maple-court" for mallory.')
    assert not MonthlyChargeRun.objects.exists()
    assert [(slug, detail) for _actor, slug, detail in tenant_denials()] == [
        ("maple-court", "not staff of maple-court")
    ]


def test_assign_vendor_to_a_complaint_of_another_association_is_a_tenant_denial(
    maple, pipe, mallory, dispatch
):
    complaint = Complaint.objects.create(organization=maple, title="Leak")

    answer = call(
        "assign_vendor",
        "--complaint",
        str(complaint.pk),
        "--vendor",
        str(pipe.pk),
        "--actor",
        "mallory",
    )

    assert answer == (1, f"No complaint with id {complaint.pk} for mallory.")
    assert not VendorAssignment.objects.exists()
    assert dispatch.received == []
    assert [(slug, detail) for _actor, slug, detail in tenant_denials()] == [
        ("maple-court", f"complaint {complaint.pk} of another association")
    ]
