from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class VendorsConfig(AppConfig):
    name = "vendors"
    verbose_name = "Vendors"

    def ready(self):
        from hoa.jobs.settling import register_settler
        from hoa.operations import add_pages
        from vendors import (  # noqa: F401  (render the refusals)
            answers,
            checks,
            invoice_answers,
            payments,
            services,
        )
        from vendors.operations import ASSIGNMENT, PAYMENT

        add_pages(_assignment_pages())
        add_pages(_invoice_pages())
        register_settler(ASSIGNMENT.name, services.settle_unknown)
        register_settler(PAYMENT.name, payments.settle_unknown)


def _assignment_pages():
    """What vendor assignment shows on the frame's pages."""
    from hoa.operations import Link, Pages
    from vendors import complaint_pages, demo

    return Pages(
        app="vendors",
        order=10,
        links=(Link(_("Vendors"), "vendors:vendors", order=30),),
        complaints=complaint_pages.COMPLAINTS,
        staff_permissions=(
            *(
                f"vendors.view_{model}"
                for model in ("vendor", "vendorcontract", "vendorassignment")
            ),
            # Keeping vendors assignable: a new certificate's expiry, on the insurance page.
            "vendors.record_insurance",
        ),
        seed_demo=demo.seed_demo,
    )


def _invoice_pages():
    """What the invoice desk and paying invoices show on the frame's pages."""
    from hoa.operations import Link, Pages, Panel
    from vendors import complaint_pages, demo, invoice_selectors

    return Pages(
        app="vendors",
        order=15,
        links=(Link(_("Invoices"), "vendors:invoices", order=35),),
        dashboard=Panel(
            context=invoice_selectors.dashboard_context, stats="vendors/_dashboard_invoices.html"
        ),
        complaints=complaint_pages.INVOICES,
        staff_permissions=(
            # The invoice workflow (vendors.invoices) that leads to a payment.
            *(
                f"vendors.{action}_invoice"
                for action in ("view", "add", "change", "approve", "void")
            ),
            "vendors.view_vendorpayment",
        ),
        seed_demo=demo.seed_invoices,
    )
