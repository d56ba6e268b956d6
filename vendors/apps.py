from django.apps import AppConfig


class VendorsConfig(AppConfig):
    name = "vendors"
    verbose_name = "Vendors"

    def ready(self):
        from hoa.operations import register
        from vendors import answers, invoice_answers  # noqa: F401  (render the refusals)
        from vendors.operations import ASSIGNMENT

        register(ASSIGNMENT)
