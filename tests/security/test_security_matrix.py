"""The permission matrix: every staff page, fenced endpoint and admin action, asked by each
persona, answers exactly as the table says; refusals write nothing and are audited.

Personas: anonymous; ``viewer`` (staff of Maple Court without permissions); ``mallory``
(staff of Oak Ridge); ``nobody`` (holds the permissions, staff of no association);
``alice`` (staff of Maple Court with the permissions); ``root`` (superuser).
"""

import re
from dataclasses import dataclass
from datetime import date

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.test import Client

from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.models import AccessDenial, Complaint, Organization, StaffMembership
from locking.models import FenceEvent
from tests.vendors_support import active_vendor, lock_keys, shown_assignments
from vendors.models import VendorAssignment

# Successful requests reach run_fenced, which opens its own transactions.
pytestmark = pytest.mark.django_db(transaction=True)

MONTH = date(2026, 3, 1)
PERSONAS = ["anonymous", "viewer", "mallory", "nobody", "alice", "root"]
ORG_CHANGELIST = "/admin/hoa/organization/"
COMPLAINT_CHANGELIST = "/admin/hoa/complaint/"


@dataclass(frozen=True)
class World:
    maple: Organization
    complaint: Complaint
    vendor_id: int


@pytest.fixture
def world(maple, oak, alice, mallory, viewer, nobody, root) -> World:
    complaint = Complaint.objects.create(organization=maple, title="Leaking pipe")
    vendor = active_vendor("Pipe Pros", maple)
    # A pending run: a refused request must leave its fence token where it is.
    MonthlyChargeRun.objects.create(organization=maple, month=MONTH)
    return World(maple=maple, complaint=complaint, vendor_id=vendor.pk)


def client_as(persona: str, django_user_model) -> Client:
    client = Client()
    if persona != "anonymous":
        client.force_login(django_user_model.objects.get(username=persona))
    return client


@dataclass(frozen=True)
class Snapshot:
    """Everything a fenced operation writes."""

    runs: tuple
    charges: int
    assignments: tuple
    complaint_tokens: tuple
    fence_events: int
    redis_keys: tuple


def snapshot(redis_client) -> Snapshot:
    return Snapshot(
        runs=tuple(
            MonthlyChargeRun.objects.order_by("pk").values_list(
                "organization_id", "month", "status", "last_fence_token"
            )
        ),
        charges=MonthlyCharge.objects.count(),
        assignments=tuple(
            VendorAssignment.objects.order_by("pk").values_list("complaint_id", "vendor_id")
        ),
        complaint_tokens=tuple(
            Complaint.objects.order_by("pk").values_list("pk", "last_fence_token")
        ),
        fence_events=FenceEvent.objects.count(),
        redis_keys=tuple(lock_keys(redis_client)),
    )


def denials() -> list[tuple[str, str, str | None, str]]:
    """The audit of refusals as (reason, actor, organization slug, operation)."""
    return [
        (d.reason, d.actor, d.organization.slug if d.organization else None, d.operation)
        for d in AccessDenial.objects.select_related("organization").order_by("pk")
    ]


def without_csrf_token(response) -> str:
    """The page with its CSRF token (masked differently on every render) blanked out."""
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", response.content.decode())


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


# -- fenced POST endpoints -------------------------------------------------------------------

# persona -> (status, audited denial reason or None)
FENCED_POST_ANSWERS = {
    "anonymous": (302, None),
    "viewer": (403, "permission"),
    "mallory": (404, "tenant"),
    "nobody": (404, "tenant"),
    "alice": (303, None),
    "root": (303, None),
}


@pytest.mark.parametrize("persona", PERSONAS)
def test_generate_charges_endpoint_answers_each_persona_as_the_matrix_says(
    persona, world, redis_client, django_user_model
):
    before = snapshot(redis_client)
    url = f"/orgs/maple-court/charges/{MONTH:%Y-%m}/generate/"

    response = client_as(persona, django_user_model).post(url, {"confirm": "yes"})

    status, reason = FENCED_POST_ANSWERS[persona]
    assert response.status_code == status
    run = MonthlyChargeRun.objects.get(organization=world.maple, month=MONTH)
    if status == 303:
        assert (run.status, run.charge_count, run.last_fence_token) == ("completed", 10, 1)
        assert run.completed_by == persona
        assert denials() == []
        return
    assert snapshot(redis_client) == before
    if persona == "anonymous":
        assert response["Location"] == f"/accounts/login/?next={url}"
        assert denials() == []
    else:
        assert denials() == [(reason, persona, "maple-court", "monthly-charges")]
        assert AccessDenial.objects.get().resource == url


@pytest.mark.parametrize("persona", PERSONAS)
def test_assign_vendor_endpoint_answers_each_persona_as_the_matrix_says(
    persona, world, redis_client, django_user_model
):
    before = snapshot(redis_client)
    url = f"/orgs/maple-court/complaints/{world.complaint.pk}/assign/"

    response = client_as(persona, django_user_model).post(url, {"vendor": world.vendor_id})

    status, reason = FENCED_POST_ANSWERS[persona]
    assert response.status_code == status
    if status == 303:
        assignment = VendorAssignment.objects.get()
        assert (assignment.complaint_id, assignment.vendor_id, assignment.active) == (
            world.complaint.pk,
            world.vendor_id,
            True,
        )
        assert Complaint.objects.get(pk=world.complaint.pk).last_fence_token == 1
        assert denials() == []
        return
    assert snapshot(redis_client) == before
    expected = [] if reason is None else [(reason, persona, "maple-court", "vendor-assignment")]
    assert denials() == expected


def test_an_id_of_another_association_under_ones_own_url_is_404_and_audited(
    world, oak, alice, redis_client
):
    oak_complaint = Complaint.objects.create(organization=oak, title="Oak gate")
    before = snapshot(redis_client)
    client = Client()
    client.force_login(alice)

    detail = client.get(f"/orgs/maple-court/complaints/{oak_complaint.pk}/")
    assign = client.post(
        f"/orgs/maple-court/complaints/{oak_complaint.pk}/assign/", {"vendor": world.vendor_id}
    )
    missing = client.get("/orgs/maple-court/complaints/987654321/")

    assert (detail.status_code, assign.status_code, missing.status_code) == (404, 404, 404)
    # The same page for an id that exists elsewhere and one that exists nowhere.
    assert without_csrf_token(detail) == without_csrf_token(missing)
    assert snapshot(redis_client) == before
    # Only the ids that exist in another association are attempts worth recording, under
    # the association they belong to.
    assert denials() == [
        ("tenant", "alice", "oak-ridge", ""),
        ("tenant", "alice", "oak-ridge", "vendor-assignment"),
    ]


def test_a_slug_or_id_that_exists_nowhere_is_a_plain_404_not_on_record(world, django_user_model):
    alice = client_as("alice", django_user_model)
    mallory = client_as("mallory", django_user_model)

    answers = [
        alice.get("/orgs/no-such-association/").status_code,
        alice.get("/orgs/maple-court/complaints/987654321/").status_code,
        mallory.post("/orgs/no-such-association/charges/2026-03/generate/").status_code,
    ]

    assert answers == [404, 404, 404]
    assert denials() == []  # typos, not attempts on anybody's data


# -- admin actions ---------------------------------------------------------------------------

# persona -> (status, audited denial reason or None); 302 back to the changelist means the
# action ran on the user's rows only (none, for staff of another association).
ADMIN_ACTION_ANSWERS = {
    "anonymous": (302, None),
    "viewer": (403, "permission"),
    "mallory": (302, "tenant"),
    "nobody": (302, "tenant"),
    "alice": (302, None),
    "root": (302, None),
}


def apply_generate_action(client, organization):
    return client.post(
        ORG_CHANGELIST,
        {
            "action": "generate_charges_for_month",
            ACTION_CHECKBOX_NAME: [organization.pk],
            "month": f"{MONTH:%Y-%m}",
            "confirm": "on",
            "apply": "Generate charges",
        },
    )


def apply_assign_action(client, complaint, vendor_id):
    return client.post(
        COMPLAINT_CHANGELIST,
        {
            "action": "assign_vendor",
            ACTION_CHECKBOX_NAME: [complaint.pk],
            **shown_assignments([complaint]),
            "vendor": vendor_id,
            "apply": "Assign",
        },
    )


@pytest.mark.parametrize("persona", PERSONAS)
def test_generate_charges_admin_action_answers_each_persona_as_the_matrix_says(
    persona, world, redis_client, django_user_model
):
    before = snapshot(redis_client)

    response = apply_generate_action(client_as(persona, django_user_model), world.maple)

    status, reason = ADMIN_ACTION_ANSWERS[persona]
    assert response.status_code == status
    run = MonthlyChargeRun.objects.get(organization=world.maple, month=MONTH)
    if persona in ("alice", "root"):
        assert response["Location"] == ORG_CHANGELIST
        assert (run.status, run.last_fence_token, run.completed_by) == ("completed", 1, persona)
        assert denials() == []
        return
    assert snapshot(redis_client) == before
    if persona == "anonymous":
        assert response["Location"].startswith("/admin/login/")
        assert denials() == []
    else:
        assert [(r, a) for r, a, _org, _op in denials()] == [(reason, persona)]


@pytest.mark.parametrize("persona", PERSONAS)
def test_assign_vendor_admin_action_answers_each_persona_as_the_matrix_says(
    persona, world, redis_client, django_user_model
):
    before = snapshot(redis_client)

    response = apply_assign_action(
        client_as(persona, django_user_model), world.complaint, world.vendor_id
    )

    status, reason = ADMIN_ACTION_ANSWERS[persona]
    assert response.status_code == status
    if persona in ("alice", "root"):
        assert VendorAssignment.objects.get().vendor_id == world.vendor_id
        assert Complaint.objects.get(pk=world.complaint.pk).last_fence_token == 1
        assert denials() == []
        return
    assert snapshot(redis_client) == before
    expected = [] if reason is None else [(reason, persona)]
    assert [(r, a) for r, a, _org, _op in denials()] == expected


def test_staff_with_view_rights_but_without_the_permission_cannot_run_either_action(
    world, redis_client, django_user_model
):
    clerk = django_user_model.objects.create_user(username="clerk", password="x", is_staff=True)
    clerk.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_organization", "view_complaint"])
    )
    StaffMembership.objects.create(user=clerk, organization=world.maple)
    client = Client()
    client.force_login(clerk)
    before = snapshot(redis_client)

    generate = apply_generate_action(client, world.maple)
    assign = apply_assign_action(client, world.complaint, world.vendor_id)

    # Django's answer when the user has no action at all: the changelist, nothing run.
    assert (generate.status_code, assign.status_code) == (200, 200)
    assert messages_of(generate) == messages_of(assign) == []
    assert snapshot(redis_client) == before
    assert [(r, a) for r, a, _org, _op in denials()] == [
        ("permission", "clerk"),
        ("permission", "clerk"),
    ]


# -- pages that only read --------------------------------------------------------------------

ORG_PAGES = [
    "/orgs/maple-court/",
    "/orgs/maple-court/charges/",
    f"/orgs/maple-court/charges/{MONTH:%Y-%m}/",
    "/orgs/maple-court/complaints/",
    "/orgs/maple-court/complaints/{complaint}/",
    "/orgs/maple-court/vendors/",
]
# persona -> status of every Maple Court page
ORG_PAGE_ANSWERS = {
    "anonymous": 302,
    "viewer": 200,
    "mallory": 404,
    "nobody": 404,
    "alice": 200,
    "root": 200,
}


@pytest.mark.parametrize("persona", PERSONAS)
def test_staff_pages_answer_each_persona_as_the_matrix_says(
    persona, world, redis_client, django_user_model
):
    client = client_as(persona, django_user_model)
    before = snapshot(redis_client)

    statuses = {
        page: client.get(page.format(complaint=world.complaint.pk)).status_code
        for page in ORG_PAGES
    }

    assert statuses == dict.fromkeys(ORG_PAGES, ORG_PAGE_ANSWERS[persona])
    assert snapshot(redis_client) == before
    if ORG_PAGE_ANSWERS[persona] == 404:
        # Each cross-tenant page view is on record, under the association it reached for.
        assert denials() == [("tenant", persona, "maple-court", "")] * len(ORG_PAGES)
    else:
        assert denials() == []


@pytest.mark.parametrize("persona", PERSONAS)
def test_organization_list_and_lock_page_show_only_the_personas_associations(
    persona, world, django_user_model
):
    FenceEvent.objects.create(
        resource=f"monthly-charges:org:{world.maple.pk}:2026-01",
        scope=f"org:{world.maple.pk}",
        operation="monthly-charges",
        outcome="committed",
        token=7,
        actor="alice",
    )
    client = client_as(persona, django_user_model)

    organizations = client.get("/orgs/")
    locks = client.get("/ops/locks/")

    if persona == "anonymous":
        assert (organizations.status_code, locks.status_code) == (302, 302)
        return
    # The lock page is the operators': office staff are refused whatever they are staff of.
    assert (organizations.status_code, locks.status_code) == (
        200,
        200 if persona == "root" else 403,
    )
    sees_maple = persona in ("viewer", "alice", "root")
    assert ("Maple Court" in organizations.content.decode()) is sees_maple
    # Made an operator, each persona sees the leases and attempts of its own associations.
    user = django_user_model.objects.get(username=persona)
    user.user_permissions.add(Permission.objects.get(codename="view_fenceevent"))
    locks = client_as(persona, django_user_model).get("/ops/locks/")
    assert locks.status_code == 200
    assert (f"monthly-charges:org:{world.maple.pk}:2026-01" in locks.content.decode()) is (
        sees_maple
    )


@pytest.mark.parametrize("persona", PERSONAS)
def test_metrics_are_not_tenant_data_a_session_does_not_open_them(
    persona, world, settings, django_user_model
):
    settings.METRICS_TOKEN = "scrape-token-for-tests"
    client = client_as(persona, django_user_model)

    from_outside = client.get("/metrics", REMOTE_ADDR="203.0.113.7")
    with_token = client.get(
        "/metrics",
        REMOTE_ADDR="203.0.113.7",
        headers={"authorization": "Bearer scrape-token-for-tests"},
    )

    assert from_outside.status_code == 401  # even for a superuser's session
    assert with_token.status_code == 200


# persona -> status of Maple's complaint change page in the admin
ADMIN_CHANGE_ANSWERS = {
    "anonymous": 302,
    "viewer": 403,
    "mallory": 302,
    "nobody": 302,
    "alice": 200,
    "root": 200,
}


@pytest.mark.parametrize("persona", PERSONAS)
def test_admin_change_page_of_another_associations_object_looks_missing(
    persona, world, django_user_model
):
    client = client_as(persona, django_user_model)
    url = f"{COMPLAINT_CHANGELIST}{world.complaint.pk}/change/"

    response = client.get(url)

    assert response.status_code == ADMIN_CHANGE_ANSWERS[persona]
    if persona in ("mallory", "nobody"):
        missing = client.get(f"{COMPLAINT_CHANGELIST}987654321/change/")
        # Exactly the answer for an id that does not exist: no hint that it does.
        assert response["Location"] == missing["Location"] == "/admin/"
        assert [(r, a) for r, a, _org, _op in denials()] == [("tenant", persona)]
