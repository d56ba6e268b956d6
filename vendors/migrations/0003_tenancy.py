"""Tenancy held by the database: an assignment's vendor had a contract with the
complaint's association when it was assigned.

What the data can hold: a contract row between the vendor and the association. The
service checks that one covers the day (``ContractNotActive``); the database checks, when
an assignment is written (a row trigger: assignments are few), that the vendor has a
contract with the complaint's association at all, so no assignment sends another
association's vendor. Contracts are edited later (windows end, rows are removed); an
assignment keeps the vendor it was written with, as the history it is. Complaints never
change association (hoa 0005), so the check at write time holds for good.

The migration first checks the rows that exist and refuses to run, naming them, if any
assignment already sends a vendor without a contract with the complaint's association.
"""

from django.db import migrations

TRIGGER = """
CREATE FUNCTION vendors_assignment_under_contract() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1
          FROM hoa_complaint complaint
          JOIN vendors_vendorcontract contract
            ON contract.organization_id = complaint.organization_id
         WHERE complaint.id = NEW.complaint_id AND contract.vendor_id = NEW.vendor_id
    ) THEN
        RAISE EXCEPTION 'vendor % has no contract with the association of complaint %',
            NEW.vendor_id, NEW.complaint_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER assignment_under_contract
    BEFORE INSERT OR UPDATE OF vendor_id, complaint_id ON vendors_vendorassignment
    FOR EACH ROW EXECUTE FUNCTION vendors_assignment_under_contract();
"""

UNDO = """
DROP TRIGGER assignment_under_contract ON vendors_vendorassignment;
DROP FUNCTION vendors_assignment_under_contract();
"""


def refuse_rows_that_break_the_rule(apps, schema_editor):
    from django.db.models import Exists, OuterRef

    VendorAssignment = apps.get_model("vendors", "VendorAssignment")
    VendorContract = apps.get_model("vendors", "VendorContract")
    contract = VendorContract.objects.filter(
        vendor=OuterRef("vendor"), organization=OuterRef("complaint__organization")
    )
    crossed = (
        VendorAssignment.objects.filter(~Exists(contract))
        .values_list("pk", "vendor__name", "complaint_id", "complaint__organization__name")
        .order_by("pk")[:20]
    )
    lines = [
        f"assignment {pk} sends {vendor} to complaint #{complaint} of {organization}, "
        "with no contract between them"
        for pk, vendor, complaint, organization in crossed
    ]
    if lines:
        raise RuntimeError(
            "Assignments send vendors without a contract with the complaint's association; "
            "add the contracts (or correct the rows) before migrating:\n  " + "\n  ".join(lines)
        )


class Migration(migrations.Migration):
    dependencies = [
        ("vendors", "0002_assigned_status"),
        ("hoa", "0005_tenancy"),
    ]

    operations = [
        migrations.RunPython(refuse_rows_that_break_the_rule, migrations.RunPython.noop),
        migrations.RunSQL(TRIGGER, UNDO),
    ]
