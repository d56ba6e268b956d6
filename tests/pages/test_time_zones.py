"""Time in the association's zone (issue 25, item 6).

An association has an IANA time zone (default ``TIME_ZONE``). Its staff pages show every
time in it with the zone's abbreviation (one format: ``2026-12-03 17:44 EST``) and read the
times they are given in it; its months (this month, the billing window, a month start's
month) are its own. Months read "December 2026" for people, ``YYYY-MM`` in URLs and CSV.
"""

from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.test import Client

from charges.month_start import month_of
from hoa.models import Complaint

pytestmark = pytest.mark.django_db


@pytest.fixture
def in_new_york(maple):
    maple.time_zone = "America/New_York"
    maple.save()
    return maple


def test_the_complaint_page_shows_times_in_the_associations_zone(client, alice, in_new_york):
    opened = datetime(2026, 1, 15, 15, 30, tzinfo=UTC)  # 10:30 in New York (EST)
    complaint = Complaint.objects.create(organization=in_new_york, title="Leak", opened_at=opened)
    client.force_login(alice)

    page = client.get(f"/orgs/{in_new_york.slug}/complaints/{complaint.pk}/").content.decode()

    assert "2026-01-15 10:30 EST" in page
    assert "15:30" not in page


def test_a_time_staff_type_is_read_in_the_associations_zone(client, alice, in_new_york):
    complaint = Complaint.objects.create(organization=in_new_york, title="Leak")
    client.force_login(alice)

    response = client.post(
        f"/orgs/{in_new_york.slug}/complaints/{complaint.pk}/sla/",
        {
            "due_at": "2027-07-01T09:00",
            "reason": "Parts on order",
            "seen_due": int(complaint.sla_due_at.timestamp()),
        },
    )

    assert response.status_code == 303
    complaint.refresh_from_db()
    # 09:00 in New York in July is EDT (UTC-4): 13:00 UTC.
    assert complaint.sla_due_at == datetime(2027, 7, 1, 13, 0, tzinfo=UTC)


def test_each_association_bills_its_own_current_month(maple, oak):
    """Kiritimati (UTC+14) and GMT+12 (UTC-12) are 26 hours apart: around the turn of a
    month they are in different months, and each association bills its own."""
    maple.time_zone, oak.time_zone = "Pacific/Kiritimati", "Etc/GMT+12"
    for organization in (maple, oak):
        organization.save()
        today = datetime.now(organization.zone).date()
        assert month_of(organization, None) == today.replace(day=1)


def test_the_charges_page_offers_the_associations_month_by_name(alice, maple):
    maple.time_zone = "Pacific/Kiritimati"
    maple.save()
    this_month = datetime.now(maple.zone).date().replace(day=1)
    client = Client()
    client.force_login(alice)

    for path in (f"/orgs/{maple.slug}/charges/", f"/orgs/{maple.slug}/"):  # and the dashboard
        page = client.get(path).content.decode()

        assert f"Generate charges for {this_month:%B %Y}" in page, path
        assert f"/charges/{this_month:%Y-%m}/generate/" in page, path  # YYYY-MM in the URL


def test_an_unknown_time_zone_is_a_field_error_in_the_admin(client, root, maple):
    client.force_login(root)
    response = client.post(
        f"/admin/hoa/organization/{maple.pk}/change/",
        {
            "name": maple.name,
            "slug": maple.slug,
            "sla_hours_high": 24,
            "sla_hours_normal": 72,
            "sla_hours_low": 168,
            "time_zone": "Mars/Olympus_Mons",
        },
    )
    assert response.status_code == 200
    assert "Mars/Olympus_Mons is not a time zone name" in str(
        response.context["adminform"].form.errors["time_zone"]
    )
    maple.refresh_from_db()
    assert maple.time_zone == "UTC"


@pytest.mark.django_db(transaction=True)
def test_the_month_start_without_a_month_bills_each_associations_own(
    maple, oak, http_stub, settings
):
    settings.BILLING_WEBHOOK_URL = http_stub.url_for("billing")
    maple.time_zone, oak.time_zone = "Pacific/Kiritimati", "Etc/GMT+12"
    maple.save()
    oak.save()

    call_command("generate_monthly_charges", "--all-orgs", verbosity=1)

    months = {request.json["month"] for request in http_stub.received}
    expected = {f"{datetime.now(o.zone).date():%Y-%m}" for o in (maple, oak)}
    assert months == expected
