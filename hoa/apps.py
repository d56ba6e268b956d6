from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class HoaConfig(AppConfig):
    name = "hoa"
    verbose_name = "Associations"

    def ready(self):
        from django.contrib.auth.signals import user_login_failed

        from hoa.web import fields

        fields.register()  # <id:pk> in every URLconf of the product

        from hoa.security.audit import count_failed_sign_in

        # Failed sign-ins (site and admin login alike) count towards the lockout.
        user_login_failed.connect(count_failed_sign_in, dispatch_uid="hoa-count-failed-sign-in")

        from hoa.jobs.outbox_metrics import ReporterOutboxCollector
        from hoa.jobs.settling import UnsettledCallsCollector
        from hoa.ops.metrics_view import register_scrape_collector

        register_scrape_collector(ReporterOutboxCollector())  # the reporters' outbox
        register_scrape_collector(UnsettledCallsCollector())  # calls of unknown outcome

        from hoa import checks  # noqa: F401  (registers hoa.W001)
        from hoa.complaints import answers  # noqa: F401  (renders the workflow's refusals)

        # Each app's operations module registers its fenced operations where it declares
        # them (``register``), as each admin module registers its admins.
        autodiscover_modules("operations")
