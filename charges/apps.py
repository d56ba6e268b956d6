from django.apps import AppConfig


class ChargesConfig(AppConfig):
    name = "charges"
    verbose_name = "Charges"

    def ready(self):
        from charges import (
            answers,  # noqa: F401  (renders the refusals' sentences)
            services,
        )
        from charges.metrics import MonthStartCollector
        from charges.operations import GENERATION
        from hoa.jobs.settling import register_settler
        from hoa.operations import register
        from hoa.ops.metrics_view import register_scrape_collector

        register(GENERATION)
        register_settler(GENERATION.name, services.settle_unknown)
        register_scrape_collector(MonthStartCollector())
