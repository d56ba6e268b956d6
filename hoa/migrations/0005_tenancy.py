"""Tenancy held by the database: a complaint's unit is one of its association's.

- A composite foreign key ``(unit_id, organization_id)`` -> ``hoa_unit (id,
  organization_id)`` (Django 5.2 has no composite foreign keys: RunSQL), so no complaint can
  name another association's unit, whatever the admin allows. A complaint without a unit
  (a common area) is not checked (MATCH SIMPLE).
- A unit and a complaint never move to another association (a trigger refuses the
  UPDATE): the rows that point at them (charges, assignments, timelines) stay their
  association's.
- Deleting a unit or an association never takes complaints with it (PROTECT).

The migration first checks the rows that exist and refuses to run, naming them, if any
complaint already names another association's unit.
"""

from django.db import migrations, models

import django.db.models.deletion

COMPOSITE_KEY = """
ALTER TABLE hoa_complaint
    ADD CONSTRAINT complaint_unit_of_its_organization
    FOREIGN KEY (unit_id, organization_id) REFERENCES hoa_unit (id, organization_id)
    ON UPDATE RESTRICT ON DELETE RESTRICT;
"""

# One function, two triggers: hoa_unit and hoa_complaint keep their organization_id.
STAYS_IN_ITS_ASSOCIATION = """
CREATE FUNCTION hoa_stays_in_its_association() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% % belongs to association % and cannot move to association %',
        TG_TABLE_NAME, OLD.id, OLD.organization_id, NEW.organization_id
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;
CREATE TRIGGER unit_stays_in_its_association
    BEFORE UPDATE OF organization_id ON hoa_unit FOR EACH ROW
    WHEN (OLD.organization_id IS DISTINCT FROM NEW.organization_id)
    EXECUTE FUNCTION hoa_stays_in_its_association();
CREATE TRIGGER complaint_stays_in_its_association
    BEFORE UPDATE OF organization_id ON hoa_complaint FOR EACH ROW
    WHEN (OLD.organization_id IS DISTINCT FROM NEW.organization_id)
    EXECUTE FUNCTION hoa_stays_in_its_association();
"""

UNDO = """
ALTER TABLE hoa_complaint DROP CONSTRAINT complaint_unit_of_its_organization;
DROP TRIGGER unit_stays_in_its_association ON hoa_unit;
DROP TRIGGER complaint_stays_in_its_association ON hoa_complaint;
DROP FUNCTION hoa_stays_in_its_association();
"""


def refuse_rows_that_break_the_rule(apps, schema_editor):
    Complaint = apps.get_model("hoa", "Complaint")
    crossed = (
        Complaint.objects.filter(unit__isnull=False)
        .exclude(unit__organization=models.F("organization"))
        .select_related("organization", "unit__organization")
        .order_by("pk")
    )
    lines = [
        f"complaint #{c.pk} of {c.organization.name} names unit {c.unit.label} of "
        f"{c.unit.organization.name}"
        for c in crossed[:20]
    ]
    if lines:
        raise RuntimeError(
            "Complaints name units of another association; give each one a unit of its own "
            "association (or none) before migrating:\n  " + "\n  ".join(lines)
        )


class Migration(migrations.Migration):
    dependencies = [
        ("hoa", "0004_complaint_workflow"),
    ]

    operations = [
        migrations.RunPython(refuse_rows_that_break_the_rule, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="complaint",
            name="organization",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="complaints",
                to="hoa.organization",
            ),
        ),
        migrations.AlterField(
            model_name="complaint",
            name="unit",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="complaints",
                to="hoa.unit",
            ),
        ),
        migrations.AddConstraint(
            model_name="unit",
            constraint=models.UniqueConstraint(
                fields=("id", "organization"), name="unit_of_organization"
            ),
        ),
        migrations.RunSQL(COMPOSITE_KEY + STAYS_IN_ITS_ASSOCIATION, UNDO),
    ]
