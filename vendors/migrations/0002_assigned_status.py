"""Complaints that had a vendor before the ``assigned`` status existed become assigned."""

from django.db import migrations


def forwards(apps, schema_editor):
    Complaint = apps.get_model("hoa", "Complaint")
    VendorAssignment = apps.get_model("vendors", "VendorAssignment")
    with_vendor = VendorAssignment.objects.filter(active=True).values("complaint_id")
    Complaint.objects.filter(status="open", pk__in=with_vendor).update(status="assigned")


def backwards(apps, schema_editor):
    Complaint = apps.get_model("hoa", "Complaint")
    Complaint.objects.filter(status="assigned").update(status="open")


class Migration(migrations.Migration):
    dependencies = [
        ("hoa", "0004_complaint_workflow"),
        ("vendors", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
