"""Vendor assignment and vendor payment, each declared once: what the frame and the runner
know of them.

Their names and lock resources are ``vendors.resources``'. ``VendorsConfig.ready()``
registers ``ASSIGNMENT`` and ``PAYMENT``; the services find them in the frame's registry
(``hoa.operations.operation``), since the declarations name the demo that calls them.
"""

import re
from collections.abc import Iterable
from datetime import timedelta

from django.utils.translation import gettext_lazy as _

from hoa.operations import FencedOperation, Link, Panel
from vendors import answers, complaint_pages, demo, invoice_answers, invoice_selectors, selectors
from vendors.resources import OPERATION, PAYMENT_OPERATION, PAYMENT_PREFIX, PREFIX
from vendors.resources import assignment_resource as assignment_resource  # named here too
from vendors.resources import payment_resource as payment_resource

ASSIGN_PERMISSION = complaint_pages.ASSIGN_PERMISSION


def scan_prefixes(organization_ids: Iterable[int]) -> list[str]:
    return [PREFIX]


ASSIGNMENT = FencedOperation(
    name=OPERATION,
    permission=ASSIGN_PERMISSION,
    # Ids of at most 18 digits fit a bigint; [0-9], not \d (other scripts' digits).
    resource=re.compile(r"vendor-assignment:complaint:(?P<complaint>[0-9]{1,18})"),
    example=f"{PREFIX}1",
    answers=answers.refusal_sentence,
    ttl=timedelta(seconds=30),
    ttl_setting="VENDOR_LOCK_TTL_SECONDS",
    describe=selectors.describe_resources,
    scan_prefixes=scan_prefixes,
    order=10,
    links=(Link(_("Vendors"), "vendors:vendors", order=30),),
    complaints=complaint_pages.COMPLAINTS,
    staff_permissions=(
        *(f"vendors.view_{model}" for model in ("vendor", "vendorcontract", "vendorassignment")),
        # Keeping vendors assignable: a new certificate's expiry, on the insurance page.
        "vendors.record_insurance",
    ),
    seed_demo=demo.seed_demo,
)


PAY_PERMISSION = "vendors.pay_invoice"

PAYMENT = FencedOperation(
    name=PAYMENT_OPERATION,
    permission=PAY_PERMISSION,
    resource=re.compile(r"vendor-payment:invoice:(?P<invoice>[0-9]{1,18})"),
    example=f"{PAYMENT_PREFIX}1",
    answers=invoice_answers.refusal_sentence,
    ttl=timedelta(seconds=30),
    ttl_setting="VENDOR_PAYMENT_LOCK_TTL_SECONDS",
    describe=selectors.describe_payment_resources,
    scan_prefixes=lambda organization_ids: [PAYMENT_PREFIX],
    order=15,
    links=(Link(_("Invoices"), "vendors:invoices", order=35),),
    dashboard=Panel(
        context=invoice_selectors.dashboard_context, stats="vendors/_dashboard_invoices.html"
    ),
    complaints=complaint_pages.INVOICES,
    staff_permissions=(
        # The invoice workflow (vendors.invoices) that leads to a payment.
        *(f"vendors.{action}_invoice" for action in ("view", "add", "change", "approve", "void")),
        "vendors.view_vendorpayment",
    ),
    seed_demo=demo.seed_invoices,
)
