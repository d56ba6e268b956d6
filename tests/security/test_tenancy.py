"""Tenancy held by the database, and an audit nobody deletes (issue 25, items 1 and 2).

The database refuses a row that points at a unit, run or complaint of another association,
whatever wrote it (the admin, a shell, a bug); the admin answers the same mistakes with a
field error, never a 500; deleting a unit or an association takes no complaint, charge or
timeline with it; and no one, superusers included, deletes fence events, access denials,
complaints or their timelines from the admin.
"""

import importlib
from datetime import date, timedelta

import psycopg
import pytest
from django.apps import apps
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.utils import timezone

from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.models import AccessDenial, Complaint, ComplaintEvent, Organization, Unit
from locking import Outcome
from locking.models import FenceEvent
from tests.vendors_support import active_vendor
from vendors.models import VendorAssignment

pytestmark = pytest.mark.django_db

MONTH = date(2026, 3, 1)
COPY_CHARGES = "COPY charges_monthlycharge (run_id, unit_id, amount, created_at) FROM STDIN"


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(
        organization=maple, unit=maple.units.get(label="M001"), title="Leaking pipe"
    )


# -- the database holds it ----------------------------------------------------------------


def test_a_complaint_cannot_name_a_unit_of_another_association(maple, oak):
    with (
        pytest.raises(IntegrityError, match="complaint_unit_of_its_organization"),
        transaction.atomic(),
    ):
        Complaint.objects.create(organization=maple, unit=oak.units.first(), title="Gate")
    assert not Complaint.objects.exists()
    Complaint.objects.create(organization=maple, unit=None, title="Lobby")  # a common area


def test_a_complaint_and_a_unit_never_move_to_another_association(complaint, oak):
    with pytest.raises(IntegrityError, match="cannot move to association"), transaction.atomic():
        Complaint.objects.filter(pk=complaint.pk).update(organization=oak, unit=None)
    unit = complaint.unit
    with pytest.raises(IntegrityError, match="cannot move to association"), transaction.atomic():
        Unit.objects.filter(pk=unit.pk).update(organization=oak)
    complaint.refresh_from_db()
    assert (complaint.organization_id, complaint.unit.organization_id) == (
        unit.organization_id,
    ) * 2


@pytest.mark.parametrize("write", ["insert", "copy", "update"])
def test_a_charge_cannot_name_a_unit_of_another_association_than_its_run(maple, oak, write):
    run = MonthlyChargeRun.objects.create(organization=maple, month=MONTH)
    ours, theirs = maple.units.first(), oak.units.first()
    # COPY goes through psycopg's own cursor, which Django does not wrap.
    with (
        pytest.raises((IntegrityError, psycopg.IntegrityError), match="of another association"),
        transaction.atomic(),
    ):
        if write == "insert":
            MonthlyCharge.objects.bulk_create(
                [
                    MonthlyCharge(run=run, unit=ours, amount=1),
                    MonthlyCharge(run=run, unit=theirs, amount=1),
                ]
            )
        elif write == "copy":
            connection.ensure_connection()
            with connection.connection.cursor() as raw, raw.copy(COPY_CHARGES) as copy:
                copy.write_row((run.pk, ours.pk, "1.00", timezone.now()))
                copy.write_row((run.pk, theirs.pk, "1.00", timezone.now()))
        else:
            charge = MonthlyCharge.objects.create(run=run, unit=ours, amount=1)
            MonthlyCharge.objects.filter(pk=charge.pk).update(unit=theirs)
    assert not MonthlyCharge.objects.exists()  # the whole statement was refused


def test_an_assignment_cannot_send_a_vendor_without_a_contract_with_the_association(complaint, oak):
    oakline = active_vendor("Oakline", oak)  # under contract with Oak Ridge only
    with (
        pytest.raises(IntegrityError, match="has no contract with the association"),
        transaction.atomic(),
    ):
        VendorAssignment.objects.create(complaint=complaint, vendor=oakline, fence_token=1)
    assert not VendorAssignment.objects.exists()


@pytest.mark.parametrize(
    ("app", "migration", "drop", "make_bad_row", "named"),
    [
        (
            "hoa",
            "0005_tenancy",
            "ALTER TABLE hoa_complaint DROP CONSTRAINT complaint_unit_of_its_organization",
            lambda maple, oak: Complaint.objects.create(
                organization=maple, unit=oak.units.first(), title="Crossed"
            ),
            "of Maple Court names unit O001 of Oak Ridge",
        ),
        (
            "charges",
            "0002_tenancy",
            "DROP TRIGGER charge_unit_of_its_run_on_insert ON charges_monthlycharge",
            lambda maple, oak: MonthlyCharge.objects.create(
                run=MonthlyChargeRun.objects.create(organization=maple, month=MONTH),
                unit=oak.units.first(),
                amount=1,
            ),
            "the 2026-03 run of Maple Court charges unit O001 of Oak Ridge",
        ),
    ],
)
def test_the_migration_refuses_to_run_over_rows_that_break_the_rule_and_names_them(
    maple, oak, app, migration, drop, make_bad_row, named
):
    """A database written before the rule: the check runs first and names each row."""
    module = importlib.import_module(f"{app}.migrations.{migration}")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the fixtures' checks, now
            cursor.execute(drop)  # rolled back with the test: DDL is transactional here
        make_bad_row(maple, oak)
        with pytest.raises(RuntimeError, match=named):
            module.refuse_rows_that_break_the_rule(apps, connection.schema_editor())
        transaction.set_rollback(True)


# -- the admin answers with a field error, never a 500 --------------------------------------


def test_the_admin_refuses_a_unit_of_another_association_with_a_field_error(root, maple, oak):
    response = admin_client(root).post(
        "/admin/hoa/complaint/add/",
        {
            "organization": maple.pk,
            "unit": oak.units.first().pk,
            "title": "Crossed",
            "description": "",
            "priority": "normal",
            "opened_at_0": "2026-03-01",
            "opened_at_1": "10:00:00",
            "events-TOTAL_FORMS": "0",
            "events-INITIAL_FORMS": "0",
            "assignments-TOTAL_FORMS": "0",
            "assignments-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["unit"] == ["Choose a unit of Maple Court."]
    assert not Complaint.objects.exists()


def test_a_complaint_keeps_its_association_and_offers_only_its_units(root, complaint, maple, oak):
    client = admin_client(root)
    page = client.get(f"/admin/hoa/complaint/{complaint.pk}/change/")
    form = page.context["adminform"].form

    assert "organization" not in form.fields  # read-only: it stays with its association
    assert set(form.fields["unit"].queryset) == set(maple.units.all())
    search = client.get(
        "/admin/autocomplete/",
        {
            "app_label": "hoa",
            "model_name": "complaint",
            "field_name": "unit",
            "organization": maple.pk,
        },
    )
    assert {r["text"].split(" · ")[0] for r in search.json()["results"]} == {"Maple Court"}


def test_deleting_a_unit_or_an_association_takes_no_complaint_with_it(root, complaint, maple):
    client = admin_client(root)
    unit_page = client.post(f"/admin/hoa/unit/{complaint.unit.pk}/delete/", {"post": "yes"})
    org_page = client.post(f"/admin/hoa/organization/{maple.pk}/delete/", {"post": "yes"})

    assert (unit_page.status_code, org_page.status_code) == (200, 200)
    assert "<title>Cannot delete unit" in unit_page.content.decode()
    assert "<title>Cannot delete organization" in org_page.content.decode()
    assert Complaint.objects.filter(pk=complaint.pk, unit=complaint.unit).exists()
    assert Organization.objects.filter(pk=maple.pk).exists()


# -- an audit nobody deletes ----------------------------------------------------------------


@pytest.fixture
def audit_rows(complaint):
    event = FenceEvent.objects.create(resource="thing:1", outcome=Outcome.COMMITTED, token=1)
    denial = AccessDenial.objects.create(reason="tenant", actor="mallory", resource="/orgs/x/")
    note = ComplaintEvent.objects.create(complaint=complaint, kind="note", detail="Called")
    return {
        "locking/fenceevent": event.pk,
        "hoa/accessdenial": denial.pk,
        "hoa/complaint": complaint.pk,
        "hoa/complaintevent": note.pk,
    }


def test_no_one_deletes_the_audit_or_a_complaint_from_the_admin(root, audit_rows):
    client = admin_client(root)
    for model, pk in audit_rows.items():
        if model == "hoa/complaintevent":
            continue  # no admin of its own: the complaint's inline, which cannot delete
        delete = client.post(f"/admin/{model}/{pk}/delete/", {"post": "yes"})
        actions = client.get(f"/admin/{model}/").context["action_form"]
        offered = [name for name, _label in actions.fields["action"].choices] if actions else []
        assert (delete.status_code, "delete_selected" in offered) == (403, False), model
    page = client.get(f"/admin/hoa/complaint/{audit_rows['hoa/complaint']}/change/")
    assert all(not inline.formset.can_delete for inline in page.context["inline_admin_formsets"])
    assert FenceEvent.objects.filter(pk=audit_rows["locking/fenceevent"]).exists()
    assert AccessDenial.objects.filter(pk=audit_rows["hoa/accessdenial"]).exists()
    assert Complaint.objects.count() == ComplaintEvent.objects.count() == 1
    # Each refused delete is itself audited, as every 403 is.
    assert AccessDenial.objects.filter(reason="permission", actor="root").count() == 3


def test_pruning_still_removes_audit_rows_past_their_retention(audit_rows, settings):
    from django.core.management import call_command

    old = timezone.now() - timedelta(days=400)
    FenceEvent.objects.update(at=old)
    AccessDenial.objects.update(at=old)
    call_command("prune_fence_events", verbosity=0)
    call_command("prune_access_denials", verbosity=0)
    assert FenceEvent.objects.count() == AccessDenial.objects.count() == 0
