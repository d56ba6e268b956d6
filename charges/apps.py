from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChargesConfig(AppConfig):
    name = "charges"
    verbose_name = "Charges"

    def ready(self):
        from charges import resources, selectors
        from hoa.operations import Link, Operation, Panel, register

        charges_pages = ("charges:runs", "charges:run", "charges:generate")
        register(
            Operation.named_by(
                resources,
                describe=selectors.describe_resources,
                order=20,
                links=(Link(_("Charges"), "charges:runs", current=charges_pages, order=10),),
                dashboard=Panel(
                    context=selectors.dashboard_context,
                    stats="charges/_dashboard_stats.html",
                    summary="charges/_organization_summary.html",
                    organization_annotations=selectors.organization_annotations,
                ),
                staff_permissions=(
                    "charges.view_monthlychargerun",
                    "charges.view_monthlycharge",
                    resources.GENERATE_PERMISSION,
                ),
            )
        )
