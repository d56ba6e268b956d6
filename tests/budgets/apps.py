from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BudgetsConfig(AppConfig):
    """Annual budget approval: the third fenced operation, installed by the test settings
    only, that proves the frame's registry (docs/architecture.md, "Adding an operation")."""

    name = "tests.budgets"
    label = "budgets"
    verbose_name = "Budgets"

    def ready(self):
        from hoa.operations import Link, Pages, Panel, add_pages, register
        from tests.budgets import (
            answers,  # noqa: F401  (renders the refusals' sentences)
            services,
            views,
        )
        from tests.budgets.operations import APPROVAL

        register(APPROVAL)
        add_pages(
            Pages(
                app="budgets",
                order=30,
                links=(Link(_("Budgets"), "budgets:budgets", order=40),),
                dashboard=Panel(
                    context=views.dashboard_context, stats="budgets/_dashboard_stats.html"
                ),
                staff_permissions=("budgets.view_annualbudget",),
                seed_demo=services.seed_demo,
            )
        )
