"""A charge's unit is checked when the charge is written, not at the commit.

Django declares foreign keys ``DEFERRABLE INITIALLY DEFERRED`` on PostgreSQL: a charge
naming a unit deleted while its run was billing failed at the COMMIT, as an
``IntegrityError`` no operation could tell from any other (and a month start's batch of
associations failed with it). Checked at once, the COPY that writes the run's charges
fails instead, with the constraint's name, and the run answers ``UnitsChanged``
(charges/services.py). The check itself is the same trigger, run at the end of the
statement instead of at the commit.
"""

from django.db import migrations

CONSTRAINT = """
    SELECT conname FROM pg_constraint
    WHERE conrelid = 'charges_monthlycharge'::regclass AND contype = 'f'
      AND confrelid = 'hoa_unit'::regclass
"""


def alter(deferrable: bool):
    def run(apps, schema_editor):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(CONSTRAINT)
            [(name,)] = cursor.fetchall()
            mode = "DEFERRABLE INITIALLY DEFERRED" if deferrable else "NOT DEFERRABLE"
            quoted = schema_editor.quote_name(name)
            cursor.execute(f"ALTER TABLE charges_monthlycharge ALTER CONSTRAINT {quoted} {mode}")

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("charges", "0003_monthlychargerun_fence_guard"),
        ("hoa", "0007_organization_time_zone"),
    ]

    operations = [migrations.RunPython(alter(deferrable=False), alter(deferrable=True))]
