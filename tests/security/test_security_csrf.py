"""CSRF on every POST: without the token, 403 with the site's page, nothing written, and
the refusal on record; with the token from the page, the same POST goes through."""

import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client

from charges.models import MonthlyChargeRun
from hoa.models import AccessDenial, Complaint, Notice
from locking.models import FenceEvent
from tests.vendors_support import active_vendor
from vendors.models import VendorAssignment

CSRF_TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@pytest.fixture
def targets(maple):
    complaint = Complaint.objects.create(organization=maple, title="Leaking pipe")
    vendor = active_vendor("Pipe Pros", maple)
    return complaint, vendor


def posts(maple, complaint, vendor) -> dict[str, tuple[str, dict]]:
    """Every POST the site accepts from a signed-in staff member: url and form data."""
    return {
        "generate": (f"/orgs/{maple.slug}/charges/2026-03/generate/", {}),
        "assign": (
            f"/orgs/{maple.slug}/complaints/{complaint.pk}/assign/",
            {"vendor": vendor.pk},
        ),
        "generate action": (
            "/admin/hoa/organization/",
            {
                "action": "generate_charges_for_month",
                ACTION_CHECKBOX_NAME: [maple.pk],
                "month": "2026-03",
                "apply": "Generate",
            },
        ),
        "assign action": (
            "/admin/hoa/complaint/",
            {
                "action": "assign_vendor",
                ACTION_CHECKBOX_NAME: [complaint.pk],
                "vendor": vendor.pk,
                "apply": "Assign",
            },
        ),
        "admin change form": (
            f"/admin/hoa/complaint/{complaint.pk}/change/",
            {"title": "Changed by a forged form", "status": "closed", "priority": "low"},
        ),
        "admin add form": (
            "/admin/hoa/notice/add/",
            {"organization": maple.pk, "title": "Forged notice"},
        ),
        "logout": ("/accounts/logout/", {}),
    }


def assert_nothing_written(complaint) -> None:
    assert not MonthlyChargeRun.objects.exists()
    assert not VendorAssignment.objects.exists()
    assert not Notice.objects.exists()
    assert not FenceEvent.objects.exists()
    fresh = Complaint.objects.get(pk=complaint.pk)
    assert (fresh.title, fresh.status, fresh.last_fence_token) == ("Leaking pipe", "open", 0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name",
    [
        "generate",
        "assign",
        "generate action",
        "assign action",
        "admin change form",
        "admin add form",
        "logout",
    ],
)
def test_every_staff_post_without_its_token_is_refused_and_audited(
    name, maple, alice, root, targets
):
    complaint, vendor = targets
    url, data = posts(maple, complaint, vendor)[name]
    client = Client(enforce_csrf_checks=True)
    client.force_login(root)  # the superuser: every POST would otherwise be allowed

    response = client.post(url, data)

    assert response.status_code == 403
    assert "This form has expired" in response.content.decode()
    assert_nothing_written(complaint)
    assert client.session.get("_auth_user_id") == str(root.pk)  # not even logged out
    denial = AccessDenial.objects.get()
    assert (denial.reason, denial.actor, denial.resource) == ("csrf", "root", url)


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_sign_in_without_its_token_is_refused(url, alice):
    client = Client(enforce_csrf_checks=True)

    response = client.post(url, {"username": "alice", "password": "pw-alice"})

    assert response.status_code == 403
    assert "_auth_user_id" not in client.session
    assert list(AccessDenial.objects.values_list("reason", "actor")) == [("csrf", "anonymous")]


@pytest.mark.django_db(transaction=True)
def test_the_same_post_with_the_pages_token_goes_through(maple, alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.get(f"/orgs/{maple.slug}/charges/2026-03/")
    token = CSRF_TOKEN.search(page.content.decode())[1]

    response = client.post(
        f"/orgs/{maple.slug}/charges/2026-03/generate/",
        {"csrfmiddlewaretoken": token, "confirm": "yes"},
    )

    assert response.status_code == 303
    assert MonthlyChargeRun.objects.get().is_completed
    assert not AccessDenial.objects.exists()
