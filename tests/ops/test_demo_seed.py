"""Issue 25, item 10: a demo that shows the product.

``seed_demo`` creates alice and bob (staff of Maple Court), omar (Oak Ridge), olivia (an
operator), admin; more than 50 complaints at Maple Court across statuses and priorities,
some past their SLA, so the filters and the pages show; and it stays idempotent.
"""

import re
from io import StringIO
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from hoa.demo import DEMO_PASSWORD, ORGANIZATIONS, demo_complaints
from hoa.models import Complaint, ComplaintEvent, Organization, StaffMembership
from vendors.models import VendorAssignment

# The demo assigns vendors through the fenced service, which opens its own transaction.
pytestmark = pytest.mark.django_db(transaction=True)

User = get_user_model()


def seed(*args) -> str:
    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def counts() -> dict[str, int]:
    return {model.__name__: model._default_manager.count() for model in apps.get_models()}


def signed_in(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=DEMO_PASSWORD)
    return client


def test_running_it_twice_changes_nothing_and_says_so():
    first = seed()
    after_first = counts()
    tokens = dict(Complaint.objects.values_list("pk", "last_fence_token"))
    second = seed()

    assert re.match(r"Demo data ready: \d+ rows added\.", first)
    assert second.startswith("Demo data already in place: nothing changed.\n")
    assert counts() == after_first
    assert dict(Complaint.objects.values_list("pk", "last_fence_token")) == tokens
    for output in (first, second):
        for username in ("admin", "alice", "bob", "omar", "olivia"):
            assert f"  {username:<8} / {DEMO_PASSWORD}" in output


def test_a_demo_password_someone_changed_is_set_back_and_reported():
    seed()
    alice = User.objects.get(username="alice")
    alice.set_password("something-else")
    alice.save()

    output = seed()

    assert output.startswith("Demo data ready: 0 rows added. 1 demo password set back.")
    assert signed_in("alice")


def test_the_people_of_the_demo():
    seed()
    staff_of = {
        username: sorted(
            StaffMembership.objects.filter(user__username=username).values_list(
                "organization__slug", flat=True
            )
        )
        for username in ("alice", "bob", "omar", "olivia")
    }

    assert staff_of == {
        "alice": ["maple-court"],
        "bob": ["maple-court"],
        "omar": ["oak-ridge"],
        "olivia": ["maple-court", "oak-ridge"],
    }
    assert User.objects.get(username="admin").is_superuser
    olivia = User.objects.get(username="olivia")
    assert "Operators" in olivia.groups.values_list("name", flat=True)
    assert olivia.has_perm("locking.break_lease") and olivia.has_perm("locking.view_fenceevent")
    bob = User.objects.get(username="bob")
    assert not bob.has_perm("locking.break_lease")
    # The operator reads the lock page; office staff are refused it.
    assert signed_in("olivia").get("/ops/locks/").status_code == 200
    assert signed_in("bob").get("/ops/locks/").status_code == 403
    assert signed_in("bob").get("/orgs/maple-court/").status_code == 200
    assert signed_in("omar").get("/orgs/maple-court/").status_code == 404


def test_maple_court_has_more_than_50_varied_complaints_so_filters_and_pages_show():
    seed()
    maple = Organization.objects.get(slug="maple-court")
    complaints = Complaint.objects.filter(organization=maple)

    assert complaints.count() > 50
    assert set(complaints.values_list("status", flat=True)) == set(Complaint.Status.values)
    assert set(complaints.values_list("priority", flat=True)) == set(Complaint.Priority.values)
    assert complaints.overdue().count() >= 5
    assert complaints.values("title").distinct().count() == complaints.count()
    assert complaints.values("reporter_name").distinct().count() >= 8
    assert complaints.filter(unit__isnull=True).exists()
    assert complaints.values("unit").distinct().count() >= 10
    # Every complaint's timeline starts with who opened it for whom.
    opened = ComplaintEvent.objects.filter(kind=ComplaintEvent.Kind.OPENED)
    assert opened.filter(complaint__organization=maple).count() == complaints.count()
    # Vendors were assigned through the fenced service: real tokens on the fence rows.
    assigned = VendorAssignment.objects.filter(complaint__organization=maple, active=True)
    assert assigned.count() >= 5
    assert all(a.fence_token == a.complaint.last_fence_token for a in assigned)
    oak = Complaint.objects.filter(organization__slug="oak-ridge").count()
    assert 6 < oak < 50

    alice = signed_in("alice")
    listing = alice.get("/orgs/maple-court/complaints/").content.decode()
    assert "Page 1 of 2" in listing
    overdue = alice.get("/orgs/maple-court/complaints/", {"overdue": "yes"})
    assert overdue.status_code == 200 and len(overdue.context["complaints"]) >= 5


def test_the_complaints_are_the_same_every_time():
    seed()
    for demo in ORGANIZATIONS:
        labels = [f"{100 + number}" for number in range(1, demo.units + 1)]
        expected = [row["title"] for row in demo_complaints(demo, labels)]
        stored = Complaint.objects.filter(organization__slug=demo.slug).order_by("pk")
        assert list(stored.values_list("title", flat=True)) == expected


def test_make_run_prints_the_logins_and_the_quick_start_names_the_ports():
    root = Path(__file__).resolve().parents[2]
    makefile = (root / "Makefile").read_text()
    readme = (root / "README.md").read_text()

    # seed_demo is quiet when stdout is not a terminal: make's seed asks for -v 1.
    assert re.search(r"^seed: migrate ## .*\n\t@\$\(DEV_ENV\) \$\(PY\) manage.py seed_demo -v 1$",
                     makefile, re.MULTILINE)  # fmt: skip
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "HOA_PG_PORT=55433 HOA_REDIS_PORT=56380 PORT=8010 make run" in quick_start
    for name in ("alice", "bob", "omar", "olivia", "admin"):
        assert f"`{name}`" in quick_start
