from django.apps import AppConfig


class VendorsConfig(AppConfig):
    name = "vendors"
    verbose_name = "Vendors"

    def ready(self):
        from hoa.jobs.settling import register_settler
        from hoa.operations import register
        from vendors import (  # noqa: F401  (render the refusals)
            answers,
            checks,
            invoice_answers,
            payments,
            services,
        )
        from vendors.operations import ASSIGNMENT, PAYMENT

        register(ASSIGNMENT)
        register(PAYMENT)
        register_settler(ASSIGNMENT.name, services.settle_unknown)
        register_settler(PAYMENT.name, payments.settle_unknown)
