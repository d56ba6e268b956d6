"""Vendors held to their insurance (issue 38, item 3): an uninsured vendor is not assigned,
the vendors page shows what lapses within 30 days, and the daily job records each lapse
once, on the invoices' and the complaints' timelines."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from hoa.models import Complaint
from locking.advisory import advisory_lock
from locking.models import FenceEvent
from tests.harness.processes import run_manage
from tests.invoices_support import approve, assignment_of, record, timeline
from tests.vendors_support import active_vendor, state_of, uninsured_vendor, vendor_with_contract
from vendors.exceptions import VendorNotInsured
from vendors.insurance import LAPSES_LOCK, record_lapses
from vendors.models import InsuranceLapse, Invoice, VendorContract
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Leaking pipe", priority="high")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# -- assigning --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lapsed_days_ago", "sentence"),
    [
        (
            1,
            "Bright Spark's insurance certificate with Maple Court lapsed on {day}: record the "
            "new certificate on the vendor's contract before assigning or paying them.",
        ),
        (
            None,
            "Bright Spark has no insurance certificate on file with Maple Court: record its "
            "expiry on the vendor's contract before assigning or paying them.",
        ),
    ],
    ids=["lapsed-yesterday", "none-on-file"],
)
def test_assigning_an_uninsured_vendor_is_refused_before_anything_is_locked(
    complaint, alice, maple, redis_client, lapsed_days_ago, sentence
):
    vendor = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=lapsed_days_ago)
    before = state_of(complaint, redis_client)

    with pytest.raises(VendorNotInsured) as refused:
        assign_vendor(complaint=complaint, vendor=vendor, actor=alice)

    day = (timezone.localdate() - timedelta(days=lapsed_days_ago or 0)).isoformat()
    assert refused.value.message == sentence.format(day=day)
    assert refused.value.answer == "bad-request"
    assert state_of(complaint, redis_client) == before
    assert before.redis_keys == ()
    assert not FenceEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_certificate_is_good_through_its_last_day_and_the_latest_one_counts(
    complaint, alice, maple
):
    vendor = active_vendor("Last Day", maple, insured_for_days=0)
    assert assign_vendor(complaint=complaint, vendor=vendor, actor=alice).outcome == "committed"

    # An older contract's lapsed certificate does not count against a newer one's.
    renewed = vendor_with_contract(
        "Renewed", maple, starts_in_days=-400, ends_in_days=-200, insured_for_days=-200
    )
    VendorContract.objects.create(
        vendor=renewed,
        organization=maple,
        starts_on=timezone.localdate() - timedelta(days=199),
        ends_on=timezone.localdate() + timedelta(days=100),
        insurance_expires_on=timezone.localdate() + timedelta(days=100),
    )
    other = Complaint.objects.create(organization=maple, title="Gate")
    assert assign_vendor(complaint=other, vendor=renewed, actor=alice).outcome == "committed"


def test_the_assign_form_answers_400_with_the_sentence_and_writes_nothing(
    complaint, alice, maple, redis_client
):
    vendor = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=3)
    url = reverse("vendors:assign", args=[maple.slug, complaint.pk])
    response = client_for(alice).post(url, {"vendor": vendor.pk})

    assert response.status_code == 400
    assert "insurance certificate with Maple Court lapsed on" in response.content.decode()
    assert state_of(complaint, redis_client).assignments == ()


# -- the vendors page -------------------------------------------------------------------------


def test_the_vendors_page_shows_what_lapses_within_30_days(client, alice, maple, oak, pipe):
    active_vendor("Soon", maple, insured_for_days=12)
    active_vendor("Edge", maple, insured_for_days=30)
    active_vendor("Later", maple, insured_for_days=31)
    uninsured_vendor("Gone", maple, lapsed_days_ago=2)
    uninsured_vendor("Unknown", maple, lapsed_days_ago=None)
    uninsured_vendor("Oak only", oak, lapsed_days_ago=2)
    client.force_login(alice)

    html = client.get(reverse("vendors:vendors", args=[maple.slug])).content.decode()

    panel = html.split('data-testid="insurance-lapsing"')[1].split("</section>")[0]
    listed = [
        name for name in ("Unknown", "Gone", "Soon", "Edge") if f">{name}</a></strong>" in panel
    ]
    assert listed == ["Unknown", "Gone", "Soon", "Edge"]
    assert panel.index("Unknown") < panel.index("Gone") < panel.index("Soon") < panel.index("Edge")
    for absent in ("Later", "Oak only", "Pipe Pros"):
        assert absent not in panel
    today = timezone.localdate()
    assert f"lapsed on {(today - timedelta(days=2)).isoformat()}" in panel
    assert f"lapses on {(today + timedelta(days=12)).isoformat()}" in panel
    assert "no certificate on file" in panel


# -- the daily job ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_daily_job_records_each_lapse_once_on_the_owed_invoices_timelines(
    alice, bob, maple, pipe
):
    lapsing = active_vendor("Bright Spark", maple, insured_for_days=5)
    owed = record(assignment_of(maple, lapsing), alice, number="B-1")
    approved = approve(
        record(assignment_of(maple, lapsing), alice, number="B-2", amount=Decimal("75.00")), bob
    )
    voided = record(assignment_of(maple, lapsing), alice, number="B-3", amount=Decimal("80.00"))
    Invoice.objects.filter(pk=voided.pk).update(status=Invoice.Status.VOID)
    insured = record(assignment_of(maple, pipe), alice, number="P-1")
    uninsured_vendor("Never", maple, lapsed_days_ago=None)  # no certificate: no date lapses

    assert record_lapses().lapses == 0  # nothing has lapsed yet
    later = timezone.now() + timedelta(days=7)
    first = record_lapses(now=later)
    again = record_lapses(now=later + timedelta(days=1))

    expired_on = timezone.localdate() + timedelta(days=5)
    assert (first.lapses, first.invoice_events, again.lapses) == (1, 2, 0)
    assert list(InsuranceLapse.objects.values_list("vendor__name", "expired_on")) == [
        ("Bright Spark", expired_on)
    ]
    for invoice in (owed, approved):
        assert timeline(invoice)[-1] == (
            "insurance_lapsed",
            "system",
            "",
            "",
            expired_on.isoformat(),
        )
    assert [kind for kind, *_ in timeline(voided)] == ["recorded"]
    assert [kind for kind, *_ in timeline(insured)] == ["recorded"]


@pytest.mark.django_db(transaction=True)
def test_a_lapse_shows_on_the_timeline_of_the_complaint_its_vendor_is_assigned_to(
    client, alice, maple
):
    vendor = active_vendor("Bright Spark", maple, insured_for_days=1)
    complaint = Complaint.objects.create(organization=maple, title="Roof leak")
    assign_vendor(complaint=complaint, vendor=vendor, actor=alice)
    other = Complaint.objects.create(organization=maple, title="Not theirs")
    record_lapses(now=timezone.now() + timedelta(days=3))
    client.force_login(alice)

    def page(of):
        return client.get(
            reverse("complaints:complaint", args=[maple.slug, of.pk])
        ).content.decode()

    day = (timezone.localdate() + timedelta(days=1)).isoformat()
    assert f"Bright Spark's insurance lapsed on {day}" in page(complaint)
    assert "insurance lapsed" not in page(other)


@pytest.mark.django_db(transaction=True)
def test_the_command_records_and_skips_while_another_host_runs_it(maple, subprocess_env):
    uninsured_vendor("Bright Spark", maple, lapsed_days_ago=1)
    with transaction.atomic(), advisory_lock(LAPSES_LOCK) as acquired:
        assert acquired
        skipped = run_manage("record_insurance_lapses", "-v", "1", env=subprocess_env)
    assert (skipped.returncode, skipped.stdout, skipped.stderr) == (
        0,
        "another insurance check is running\n",
        "",
    )
    assert not InsuranceLapse.objects.exists()

    done = run_manage("record_insurance_lapses", env=subprocess_env)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "Insurance check: 1 lapse recorded.\n",
        "",
    )
    assert InsuranceLapse.objects.count() == 1
    bad = run_manage("record_insurance_lapses", "--wait", "soon", env=subprocess_env)
    assert (bad.returncode, bad.stdout) == (1, "")
    assert bad.stderr.startswith("CommandError: --wait must be a number of seconds")
