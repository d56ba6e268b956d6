from django.db import migrations

from locking import InstallFenceGuard


class Migration(migrations.Migration):
    """The complaint's fence (vendor assignment) never goes backwards (locking/guard.py)."""

    dependencies = [
        ("hoa", "0007_organization_time_zone"),
    ]

    operations = [InstallFenceGuard("complaint")]
