from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChargesConfig(AppConfig):
    name = "charges"
    verbose_name = "Charges"

    def ready(self):
        from charges import resources, selectors
        from hoa.operations import Link, Operation, Panel, register

        register(
            Operation(
                name=resources.OPERATION,
                resource=resources.RESOURCE,
                describe=selectors.describe_resources,
                scan_prefixes=resources.scan_prefixes,
                example=f"{resources.PREFIX}1:2026-01",
                order=20,
                links=(
                    Link(
                        _("Charges"),
                        "charges:runs",
                        current=("charges:runs", "charges:run", "charges:generate"),
                        order=10,
                    ),
                ),
                dashboard=Panel(
                    context=selectors.dashboard_context,
                    stats="charges/_dashboard_stats.html",
                    summary="charges/_organization_summary.html",
                    organization_annotations=selectors.organization_annotations,
                ),
                staff_permissions=(
                    "charges.view_monthlychargerun",
                    "charges.view_monthlycharge",
                    "charges.generate_charges",
                ),
            )
        )
