from django.db import migrations, models


class Migration(migrations.Migration):
    """The resource's record keeps the newest token fenced and its grant (locking/fence.py)."""

    dependencies = [
        ("locking", "0006_receiver"),
    ]

    operations = [
        migrations.AddField(
            model_name="fenceepoch",
            name="token",
            field=models.BigIntegerField(db_default=0, default=0, verbose_name="newest fenced token"),
        ),
        migrations.AddField(
            model_name="fenceepoch",
            name="owner",
            field=models.CharField(
                db_default="", default="", max_length=64, verbose_name="fenced by grant"
            ),
        ),
    ]
