"""Vendor assignment and vendor payment, each declared once: what the frame and the runner
know of them.

Their names and lock resources are ``vendors.resources``'. Both are registered here;
``VendorsConfig.ready()`` registers what they show on the frame's pages
(``hoa.operations.Pages``).
"""

import re
from datetime import timedelta

from hoa.operations import FencedOperation, register
from vendors import answers, complaint_pages, invoice_answers, selectors
from vendors.resources import OPERATION, PAYMENT_OPERATION, PAYMENT_PREFIX, PREFIX
from vendors.resources import assignment_resource as assignment_resource  # named here too
from vendors.resources import payment_resource as payment_resource

ASSIGN_PERMISSION = complaint_pages.ASSIGN_PERMISSION


ASSIGNMENT = register(
    FencedOperation(
        name=OPERATION,
        permission=ASSIGN_PERMISSION,
        # Ids of at most 18 digits fit a bigint; [0-9], not \d (other scripts' digits).
        resource=re.compile(r"vendor-assignment:complaint:(?P<complaint>[0-9]{1,18})"),
        example=f"{PREFIX}1",
        answers=answers.WORDS,
        ttl=timedelta(seconds=30),
        ttl_setting="VENDOR_LOCK_TTL_SECONDS",
        describe=selectors.describe_resources,
    )
)


PAY_PERMISSION = "vendors.pay_invoice"

PAYMENT = register(
    FencedOperation(
        name=PAYMENT_OPERATION,
        permission=PAY_PERMISSION,
        resource=re.compile(r"vendor-payment:invoice:(?P<invoice>[0-9]{1,18})"),
        example=f"{PAYMENT_PREFIX}1",
        answers=invoice_answers.WORDS,
        ttl=timedelta(seconds=30),
        ttl_setting="VENDOR_PAYMENT_LOCK_TTL_SECONDS",
        describe=selectors.describe_payment_resources,
    )
)
