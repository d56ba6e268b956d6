"""Complaints opened from the staff pages (issue 25, item 3).

``GET /orgs/<slug>/complaints/new/`` shows the form; ``POST`` with ``unit``, ``title``,
``description``, ``priority``, ``reporter_name``, ``reporter_email`` and
``reporter_phone`` (optional) opens it with its SLA from the priority and answers 303 to it;
bad input, or a unit of another association, is a 400 that creates nothing.
"""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from hoa.models import Complaint, ComplaintEvent

pytestmark = pytest.mark.django_db

NEW_URL = "/orgs/maple-court/complaints/new/"


def posted(**changes) -> dict:
    return {
        "unit": "",
        "title": "Gate does not latch",
        "description": "The east gate swings open in the wind.",
        "priority": "high",
        "reporter_name": "Ana Ruiz",
        "reporter_email": "ana@example.org",
        "reporter_phone": "+1 (555) 010-2030",
        **changes,
    }


def test_staff_open_a_complaint_with_its_sla_and_a_timeline_that_says_for_whom(
    client, alice, maple
):
    client.force_login(alice)
    unit = maple.units.get(label="M003")
    assert client.get(NEW_URL).status_code == 200
    before = timezone.now()

    response = client.post(NEW_URL, posted(unit=unit.pk))

    complaint = Complaint.objects.get()
    assert response.status_code == 303
    assert response["Location"] == f"/orgs/maple-court/complaints/{complaint.pk}/"
    assert (complaint.unit, complaint.priority, complaint.status) == (unit, "high", "open")
    assert (complaint.reporter_name, complaint.reporter_email) == ("Ana Ruiz", "ana@example.org")
    due_in = complaint.sla_due_at - complaint.opened_at
    assert due_in == timedelta(hours=maple.sla_hours_high) and complaint.opened_at >= before
    [opened] = ComplaintEvent.objects.filter(complaint=complaint)
    assert (opened.kind, opened.actor, opened.actor_label) == ("opened", alice, "alice")
    page = client.get(response["Location"]).content.decode()
    assert "Opened by alice for Ana Ruiz" in page
    assert "ana@example.org" in page and "+1 (555) 010-2030" in page


def test_a_common_area_complaint_has_no_unit_and_the_list_offers_the_button(client, alice):
    client.force_login(alice)
    assert (
        'data-testid="new-complaint"'
        in client.get("/orgs/maple-court/complaints/").content.decode()
    )
    assert client.post(NEW_URL, posted(reporter_phone="")).status_code == 303
    assert Complaint.objects.get().unit is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"unit": "oak"}, "unit"),  # replaced below by a unit of Oak Ridge
        ({"unit": "99999999"}, "unit"),
        ({"unit": "abc"}, "unit"),
        ({"title": ""}, "title"),
        ({"title": "x" * 201}, "title"),
        ({"title": "Gate\x1b[31m"}, "title"),
        ({"description": ""}, "description"),
        ({"priority": "urgent"}, "priority"),
        ({"reporter_name": ""}, "reporter_name"),
        ({"reporter_email": "not-an-address"}, "reporter_email"),
        ({"reporter_phone": "call me"}, "reporter_phone"),
        ({"reporter_phone": "\uff11\uff12\uff13\uff14\uff15"}, "reporter_phone"),  # full-width
    ],
)
def test_bad_input_is_a_400_that_creates_nothing(client, alice, oak, changes, field):
    if changes.get("unit") == "oak":
        changes = {"unit": oak.units.first().pk}
    client.force_login(alice)

    response = client.post(NEW_URL, posted(**changes))

    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert not Complaint.objects.exists() and not ComplaintEvent.objects.exists()


def test_staff_without_the_permission_and_other_associations_are_refused(client, viewer, mallory):
    client.force_login(viewer)  # staff of Maple Court without hoa.add_complaint
    assert client.get(NEW_URL).status_code == 403
    assert client.post(NEW_URL, posted()).status_code == 403
    client.force_login(mallory)
    assert client.post(NEW_URL, posted()).status_code == 404
    assert not Complaint.objects.exists()


def test_the_reporters_contact_is_erased_a_retention_after_the_complaint_closed(maple, settings):
    settings.REPORTER_RETENTION_DAYS = 30
    old = timezone.now() - timedelta(days=31)
    kept = {"reporter_name": "Ana Ruiz", "reporter_email": "ana@example.org"}
    kept["reporter_phone"] = "555"
    closed_long_ago = Complaint.objects.create(
        organization=maple, title="Old", status="closed", closed_at=old, **kept
    )
    closed_lately = Complaint.objects.create(
        organization=maple, title="New", status="closed", closed_at=timezone.now(), **kept
    )
    still_open = Complaint.objects.create(organization=maple, title="Open", **kept)
    out = StringIO()

    call_command("forget_reporters", stdout=out, verbosity=1)

    closed_long_ago.refresh_from_db()
    assert (closed_long_ago.reporter_name, closed_long_ago.reporter_email) == ("Ana Ruiz", "")
    assert closed_long_ago.reporter_phone == ""
    for complaint in (closed_lately, still_open):
        complaint.refresh_from_db()
        assert complaint.reporter_email == "ana@example.org"
    assert out.getvalue().startswith("Erased the contact of 1 reporter (closed before ")
