from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class VendorsConfig(AppConfig):
    name = "vendors"
    verbose_name = "Vendors"

    def ready(self):
        from hoa.operations import Link, Operation, Panel, register
        from vendors import demo, resources, selectors

        complaint_pages = (
            "vendors:complaints",
            "vendors:complaint",
            "vendors:assign",
            "vendors:status",
            "vendors:note",
            "vendors:sla",
        )
        links = (
            Link(_("Complaints"), "vendors:complaints", current=complaint_pages, order=20),
            Link(_("Vendors"), "vendors:vendors", current=("vendors:vendors",), order=30),
        )
        views = ("vendor", "vendorcontract", "vendorassignment")
        register(
            Operation.named_by(
                resources,
                describe=selectors.describe_resources,
                order=10,
                links=links,
                dashboard=Panel(
                    context=selectors.dashboard_context,
                    stats="vendors/_dashboard_stats.html",
                    cards="vendors/_dashboard_cards.html",
                ),
                staff_permissions=(
                    *(f"vendors.view_{model}" for model in views),
                    resources.ASSIGN_PERMISSION,
                ),
                seed_demo=demo.seed_demo,
            )
        )
