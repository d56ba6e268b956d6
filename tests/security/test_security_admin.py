"""Tenant isolation in the admin: changelists, filters, change pages, inlines, foreign-key
menus and the intermediate forms of both actions; the audit of refusals is superuser-only."""

from datetime import date, timedelta
from io import StringIO

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.models import AccessDenial, Complaint, Notice
from tests.vendors_support import active_vendor, shown_assignments
from vendors.models import VendorAssignment, VendorContract

MONTH = date(2026, 3, 1)
ORG_CHANGELIST = "/admin/hoa/organization/"
COMPLAINT_CHANGELIST = "/admin/hoa/complaint/"


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def denial_notes() -> list[tuple[str, str, str]]:
    return list(AccessDenial.objects.order_by("pk").values_list("reason", "actor", "detail"))


@pytest.fixture
def shared_vendor(maple, oak):
    """A vendor under contract with both associations."""
    vendor = active_vendor("Pipe Pros", maple)
    today = timezone.localdate()
    VendorContract.objects.create(
        vendor=vendor, organization=oak, starts_on=today - timedelta(days=3), ends_on=today
    )
    return vendor


@pytest.fixture
def both_orgs_rows(maple, oak, shared_vendor):
    """A row of every tenant model in each association."""
    for org in (maple, oak):
        complaint = Complaint.objects.create(organization=org, title=f"{org.name} complaint")
        Notice.objects.create(organization=org, title=f"{org.name} notice")
        run = MonthlyChargeRun.objects.create(organization=org, month=MONTH)
        MonthlyCharge.objects.create(run=run, unit=org.units.first(), amount=10)
        VendorAssignment.objects.create(
            complaint=complaint, vendor=shared_vendor, fence_token=1, actor_label="seed"
        )


# Every changelist Alice may view, with a filter on the organization (directly or through a
# relation): none may name Oak Ridge, neither in a row nor among the filter's choices.
ALICE_CHANGELISTS = [
    "/admin/hoa/organization/",
    "/admin/hoa/unit/",
    "/admin/hoa/complaint/",
    "/admin/hoa/notice/",
    "/admin/charges/monthlychargerun/",
    "/admin/charges/monthlycharge/",
    "/admin/vendors/vendorcontract/",
    "/admin/vendors/vendorassignment/",
]


@pytest.mark.django_db
@pytest.mark.parametrize("url", ALICE_CHANGELISTS)
def test_changelists_and_their_filters_never_name_another_association(
    url, alice, root, both_orgs_rows
):
    alice_page = admin_client(alice).get(url)
    root_page = admin_client(root).get(url)

    assert (alice_page.status_code, root_page.status_code) == (200, 200)
    assert "Maple Court" in alice_page.content.decode()
    assert "Oak Ridge" not in alice_page.content.decode()
    assert "Oak Ridge" in root_page.content.decode()


@pytest.mark.django_db
def test_a_shared_vendors_page_lists_only_the_users_contracts(alice, root, shared_vendor):
    url = f"/admin/vendors/vendor/{shared_vendor.pk}/change/"

    alice_page = admin_client(alice).get(url)
    root_page = admin_client(root).get(url)

    assert alice_page.status_code == root_page.status_code == 200
    assert alice_page.context["inline_admin_formsets"][0].formset.queryset.count() == 1
    assert "Oak Ridge" not in alice_page.content.decode()
    assert root_page.context["inline_admin_formsets"][0].formset.queryset.count() == 2


@pytest.mark.django_db
def test_foreign_key_menus_offer_only_the_users_associations(alice, maple, oak):
    client = admin_client(alice)

    form = client.get("/admin/hoa/notice/add/")
    posted = client.post(
        "/admin/hoa/notice/add/",
        {
            "organization": oak.pk,
            "title": "Oak's water shut-off",
            "body": "",
            "publish_at_0": "2026-03-01",
            "publish_at_1": "10:00:00",
        },
    )

    choices = {value for value, _ in form.context["adminform"].form.fields["organization"].choices}
    assert choices == {"", maple.pk}
    assert posted.status_code == 200  # the form again, with the error
    assert "organization" in posted.context["adminform"].form.errors
    assert not Notice.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_generate_action_acts_only_on_the_users_rows_of_a_forged_selection(alice, maple, oak):
    client = admin_client(alice)
    selection = {"action": "generate_charges_for_month", ACTION_CHECKBOX_NAME: [maple.pk, oak.pk]}

    intermediate = client.post(ORG_CHANGELIST, {**selection, "index": "0"})
    applied = client.post(
        ORG_CHANGELIST,
        {**selection, "month": "2026-03", "confirm": "on", "apply": "Generate"},
        follow=True,
    )

    assert [org.slug for org in intermediate.context["selected"]] == ["maple-court"]
    assert "Oak Ridge" not in intermediate.content.decode()
    assert [level for level, _ in messages_of(applied)] == ["success"]
    assert list(MonthlyChargeRun.objects.values_list("organization__slug", flat=True)) == [
        "maple-court"
    ]
    assert denial_notes() == [
        ("tenant", "alice", f"action on hoa.Organization [{oak.pk}] of another association"),
        ("tenant", "alice", f"action on hoa.Organization [{oak.pk}] of another association"),
    ]


@pytest.mark.django_db(transaction=True)
def test_assign_action_acts_only_on_the_users_rows_of_a_forged_selection(
    alice, maple, oak, shared_vendor
):
    mine = Complaint.objects.create(organization=maple, title="Maple leak")
    theirs = Complaint.objects.create(organization=oak, title="Oak leak")
    client = admin_client(alice)
    selection = {"action": "assign_vendor", ACTION_CHECKBOX_NAME: [mine.pk, theirs.pk]}

    intermediate = client.post(COMPLAINT_CHANGELIST, {**selection, "index": "0"})
    applied = client.post(
        COMPLAINT_CHANGELIST,
        {
            **selection,
            **shown_assignments([mine]),  # what the page showed: alice's rows only
            "vendor": shared_vendor.pk,
            "apply": "Assign",
        },
        follow=True,
    )

    assert list(intermediate.context["selected"]) == [mine]
    assert "Oak leak" not in intermediate.content.decode()
    assert [level for level, _ in messages_of(applied)] == ["success"]
    assert list(VendorAssignment.objects.values_list("complaint_id", flat=True)) == [mine.pk]
    assert Complaint.objects.get(pk=theirs.pk).last_fence_token == 0
    assert [reason for reason, _actor, _detail in denial_notes()] == ["tenant", "tenant"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "forged_id", ["abc", "99999999999999999999", "1.5", "", "1\x00", "' OR 1=1 --"]
)
def test_malformed_ids_in_an_action_post_are_refused_with_a_message(alice, maple, forged_id):
    response = admin_client(alice).post(
        ORG_CHANGELIST,
        {
            "action": "generate_charges_for_month",
            ACTION_CHECKBOX_NAME: [maple.pk, forged_id],
            "month": "2026-03",
            "apply": "Generate",
            "confirm": "on",
        },
        follow=True,
    )

    assert response.status_code == 200
    assert messages_of(response) == [("error", "None of the selected items could be found.")]
    assert not MonthlyChargeRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("forged_id", ["abc", "99999999999999999999", "-1", "%00"])
def test_malformed_ids_in_an_admin_url_look_like_missing_objects(alice, forged_id):
    response = admin_client(alice).get(f"{COMPLAINT_CHANGELIST}{forged_id}/change/")

    assert response.status_code == 302
    assert response["Location"] == "/admin/"
    assert not AccessDenial.objects.exists()  # nothing of another association was reached


@pytest.mark.django_db
def test_the_audit_of_refusals_is_for_superusers_only_and_filterable(alice, mallory, root, maple):
    url = "/admin/hoa/accessdenial/"
    admin_client(mallory).get("/orgs/maple-court/")  # a cross-tenant attempt
    assert admin_client(alice).get(url).status_code == 403  # refused by the admin: on record

    def rows(**query) -> list[tuple[str, str]]:
        response = admin_client(root).get(url, query)
        assert response.status_code == 200
        return [(d.reason, d.actor) for d in response.context["cl"].result_list]

    assert rows() == [("permission", "alice"), ("tenant", "mallory")]
    assert rows(reason="tenant") == [("tenant", "mallory")]
    assert rows(reason="csrf") == []
    assert rows(organization__id__exact=maple.pk) == [("tenant", "mallory")]
    assert rows(q="mallory") == [("tenant", "mallory")]
    assert len(rows(q="127.0.0.1")) == 2  # by address, though the column is inet
    assert rows(q="<script>") == []


def test_prune_access_denials_keeps_its_own_retention(db, settings):
    now = timezone.now()
    for days, resource in [(120, "old"), (10, "recent")]:
        AccessDenial.objects.create(
            at=now - timedelta(days=days),
            reason=AccessDenial.Reason.TENANT,
            actor="mallory",
            resource=resource,
        )
    settings.ACCESS_DENIAL_RETENTION_DAYS = 90
    settings.FENCE_EVENT_RETENTION_DAYS = 1  # a different table's setting: not used here
    out = StringIO()

    call_command("prune_access_denials", stdout=out)

    assert out.getvalue().startswith("Deleted 1 access denial older than 90 days")
    assert list(AccessDenial.objects.values_list("resource", flat=True)) == ["recent"]
    with pytest.raises(CommandError, match="at least 1"):
        call_command("prune_access_denials", "--days", "0")
    assert AccessDenial.objects.count() == 1
