from django.db import migrations

from locking import InstallFenceGuard


class Migration(migrations.Migration):
    """The invoice's fence (vendor payment) never goes backwards (locking/guard.py)."""

    dependencies = [
        ("vendors", "0007_invoice_tenancy"),
    ]

    operations = [InstallFenceGuard("invoice")]
