"""Tenancy held by the database: a charge's unit is one of its run's association's.

A charge names a run and a unit, and carries no organization of its own: adding a column
to the largest table (2,000,000 rows a month start) only to hang a composite foreign key
on it costs every COPY a column and an index. A statement-level trigger with a transition
table checks each INSERT (and COPY) and UPDATE once, with one join over the rows it wrote,
and refuses the whole statement if any row's unit belongs to another association than its
run's. Units and runs never change association (hoa 0005; runs are never edited), so the
check at write time holds for good. docs/benchmarks.md has its cost on the month start.

The migration first checks the rows that exist and refuses to run, naming them, if any
charge already names another association's unit.
"""

from django.db import migrations

TRIGGER = """
CREATE FUNCTION charges_charge_unit_of_its_run() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    crossed record;
BEGIN
    SELECT written.run_id, written.unit_id INTO crossed
      FROM written
      JOIN charges_monthlychargerun run ON run.id = written.run_id
      JOIN hoa_unit unit ON unit.id = written.unit_id
     WHERE unit.organization_id <> run.organization_id
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a charge of run % names unit %, of another association',
            crossed.run_id, crossed.unit_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER charge_unit_of_its_run_on_insert
    AFTER INSERT ON charges_monthlycharge REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION charges_charge_unit_of_its_run();
CREATE TRIGGER charge_unit_of_its_run_on_update
    AFTER UPDATE ON charges_monthlycharge REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION charges_charge_unit_of_its_run();
"""

UNDO = """
DROP TRIGGER charge_unit_of_its_run_on_insert ON charges_monthlycharge;
DROP TRIGGER charge_unit_of_its_run_on_update ON charges_monthlycharge;
DROP FUNCTION charges_charge_unit_of_its_run();
"""


def refuse_rows_that_break_the_rule(apps, schema_editor):
    from django.db.models import F

    MonthlyCharge = apps.get_model("charges", "MonthlyCharge")
    crossed = (
        MonthlyCharge.objects.exclude(unit__organization=F("run__organization"))
        .values_list("run__organization__name", "run__month", "unit__organization__name", "unit__label")
        .order_by("pk")[:20]
    )
    lines = [
        f"the {month:%Y-%m} run of {run_org} charges unit {label} of {unit_org}"
        for run_org, month, unit_org, label in crossed
    ]
    if lines:
        raise RuntimeError(
            "Charges name units of another association; correct them before migrating:\n  "
            + "\n  ".join(lines)
        )


class Migration(migrations.Migration):
    dependencies = [
        ("charges", "0001_initial"),
        ("hoa", "0005_tenancy"),
    ]

    operations = [
        migrations.RunPython(refuse_rows_that_break_the_rule, migrations.RunPython.noop),
        migrations.RunSQL(TRIGGER, UNDO),
    ]
