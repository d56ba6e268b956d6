from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChargesConfig(AppConfig):
    name = "charges"
    verbose_name = "Charges"

    def ready(self):
        from charges import (
            answers,  # noqa: F401  (renders the refusals' sentences)
            selectors,
            services,
        )
        from charges.metrics import MonthStartCollector
        from charges.operations import GENERATION
        from hoa.jobs.settling import register_settler
        from hoa.operations import Link, Pages, Panel, add_pages
        from hoa.ops.metrics_view import register_scrape_collector

        add_pages(
            Pages(
                app="charges",
                order=20,
                links=(Link(_("Charges"), "charges:runs", order=10),),
                dashboard=Panel(
                    context=selectors.dashboard_context,
                    stats="charges/_dashboard_stats.html",
                    summary="charges/_organization_summary.html",
                    organization_annotations=selectors.organization_annotations,
                ),
                staff_permissions=("charges.view_monthlychargerun", "charges.view_monthlycharge"),
            )
        )
        register_settler(GENERATION.name, services.settle_unknown)
        register_scrape_collector(MonthStartCollector())
