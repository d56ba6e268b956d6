"""The names of vendors' two operations and of the lock resources they take.

The declarations (``vendors.operations``) name the pages, the demo and the services; what
those need of an operation's names is here, one floor below, so that none of them imports
the declaration that imports it.

``vendor-assignment:complaint:<id>`` is one lease per complaint, ``vendor-payment:invoice:<id>``
one per invoice, never wider. The organization is the complaint's or the invoice's, not in
the name, so the lock status page scans each prefix once (bounded) and keeps the leases of
the viewer's associations.
"""

OPERATION = "vendor-assignment"
PREFIX = f"{OPERATION}:complaint:"

PAYMENT_OPERATION = "vendor-payment"
PAYMENT_PREFIX = f"{PAYMENT_OPERATION}:invoice:"


def assignment_resource(complaint_id: int) -> str:
    return f"{PREFIX}{int(complaint_id)}"


def payment_resource(invoice_id: int) -> str:
    return f"{PAYMENT_PREFIX}{int(invoice_id)}"
