from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class VendorsConfig(AppConfig):
    name = "vendors"
    verbose_name = "Vendors"

    def ready(self):
        from hoa.operations import Link, Operation, Panel, register
        from vendors import demo, resources, selectors

        register(
            Operation(
                name=resources.OPERATION,
                resource=resources.RESOURCE,
                describe=selectors.describe_resources,
                scan_prefixes=resources.scan_prefixes,
                example=resources.assignment_resource(1),
                order=10,
                links=(
                    Link(
                        _("Complaints"),
                        "vendors:complaints",
                        current=("vendors:complaints", "vendors:complaint", "vendors:assign"),
                        order=20,
                    ),
                    Link(_("Vendors"), "vendors:vendors", current=("vendors:vendors",), order=30),
                ),
                dashboard=Panel(
                    context=selectors.dashboard_context,
                    stats="vendors/_dashboard_stats.html",
                    cards="vendors/_dashboard_cards.html",
                ),
                staff_permissions=(
                    "vendors.view_vendor",
                    "vendors.view_vendorcontract",
                    "vendors.view_vendorassignment",
                    "vendors.assign_vendor",
                ),
                seed_demo=demo.seed_demo,
            )
        )
