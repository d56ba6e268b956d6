import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("hoa", "0007_organization_time_zone"),
        ("vendors", "0004_assignment_ends_with_its_complaint"),
    ]

    operations = [
        migrations.AddField(
            model_name="vendorcontract",
            name="insurance_expires_on",
            field=models.DateField(
                help_text="The expiry date on the vendor's certificate of insurance. The vendor cannot be assigned or paid once it has passed.",
                null=True,
                verbose_name="insurance certificate expires on",
            ),
        ),
        migrations.CreateModel(
            name="InsuranceLapse",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("expired_on", models.DateField(verbose_name="certificate expired on")),
                ("recorded_at", models.DateTimeField(default=django.utils.timezone.now, verbose_name="recorded at")),
                (
                    "organization",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="insurance_lapses",
                        to="hoa.organization",
                    ),
                ),
                (
                    "vendor",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="insurance_lapses",
                        to="vendors.vendor",
                    ),
                ),
            ],
            options={
                "ordering": ["-expired_on", "vendor__name"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("vendor", "organization", "expired_on"), name="one_lapse_per_certificate"
                    )
                ],
            },
        ),
    ]
