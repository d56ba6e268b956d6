from django.db import migrations

from locking import InstallFenceGuard


class Migration(migrations.Migration):
    """The invoice's fence never goes backwards (locking/guard.py)."""

    dependencies = [
        ("invoices", "0001_initial"),
    ]

    operations = [InstallFenceGuard("invoice")]
