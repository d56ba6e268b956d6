"""An assignment says why it ended (replaced, or its complaint closed), and a closed
complaint keeps no active vendor (``vendors.closing``).

Ended assignments so far were all replaced. Closed complaints that still have an active
vendor (closed before closing ended the assignment) have it ended at the close, or at the
assignment when that came later (the race the close now refuses); their vendors are not
told now, as they were not told then.
"""

from django.db import migrations, models
from django.db.models import F, OuterRef, Subquery
from django.db.models.functions import Greatest


def forwards(apps, schema_editor):
    Complaint = apps.get_model("hoa", "Complaint")
    VendorAssignment = apps.get_model("vendors", "VendorAssignment")
    VendorAssignment.objects.filter(active=False).update(ended_because="replaced")
    closed = Complaint.objects.filter(status="closed")
    closed_at = closed.filter(pk=OuterRef("complaint_id")).values("closed_at")[:1]
    VendorAssignment.objects.filter(active=True, complaint__in=closed.values("pk")).update(
        active=False,
        deactivated_at=Greatest(Subquery(closed_at), F("assigned_at")),
        ended_because="closed",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("hoa", "0009_complaintevent_at_from_the_database"),
        ("vendors", "0003_tenancy"),
    ]

    operations = [
        migrations.AddField(
            model_name="vendorassignment",
            name="ended_because",
            field=models.CharField(
                blank=True,
                choices=[("replaced", "replaced"), ("closed", "complaint closed")],
                default="",
                max_length=20,
                verbose_name="ended because",
            ),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
