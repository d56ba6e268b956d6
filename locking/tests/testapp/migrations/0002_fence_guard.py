from django.db import migrations

from locking import InstallFenceGuard


class Migration(migrations.Migration):
    dependencies = [
        ("locking_testapp", "0001_initial"),
    ]

    operations = [InstallFenceGuard("fencedthing")]
