from django.db import migrations

from locking import InstallFenceGuard


class Migration(migrations.Migration):
    """A charge run's fence never goes backwards (locking/guard.py)."""

    dependencies = [
        ("charges", "0002_tenancy"),
    ]

    operations = [InstallFenceGuard("monthlychargerun")]
