from django.apps import AppConfig


class VendorsConfig(AppConfig):
    name = "vendors"
    verbose_name = "Vendors"

    def ready(self):
        from hoa.operations import register
        from vendors import (  # noqa: F401  (render the refusals)
            answers,
            checks,
            invoice_answers,
        )
        from vendors.operations import ASSIGNMENT, PAYMENT

        register(ASSIGNMENT)
        register(PAYMENT)
