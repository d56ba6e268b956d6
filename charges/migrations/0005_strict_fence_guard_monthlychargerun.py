from django.db import migrations

from locking import InstallFenceGuard


class Migration(migrations.Migration):
    """A charge run is written only under its fence: the guard refuses any other write
    (locking's strict mode; docs/architecture.md, "Fenced tables")."""

    dependencies = [
        ("charges", "0004_charge_unit_checked_at_once"),
    ]

    operations = [InstallFenceGuard("monthlychargerun", strict=True)]
