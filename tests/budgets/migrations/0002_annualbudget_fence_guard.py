from django.db import migrations

from locking import InstallFenceGuard


class Migration(migrations.Migration):
    """The budget's fence never goes backwards (locking/guard.py)."""

    dependencies = [
        ("budgets", "0001_initial"),
    ]

    operations = [InstallFenceGuard("annualbudget")]
