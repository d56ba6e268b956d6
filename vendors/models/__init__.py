"""Vendors, their contracts with associations (and insurance), their assignments to
complaints, the invoices they send for them and the payments of those invoices.

Split by concern; every model is importable from ``vendors.models``, as the migrations
name them.
"""

from vendors.models.assignments import VendorAssignment, VendorAssignmentQuerySet
from vendors.models.contracts import (
    CertificateRecorded,
    InsuranceLapse,
    Vendor,
    VendorContract,
    VendorContractQuerySet,
    VendorQuerySet,
)
from vendors.models.invoices import (
    DEFAULT_APPROVAL_THRESHOLD,
    ApprovalPolicy,
    Invoice,
    InvoiceApproval,
    InvoiceDocument,
    InvoiceEvent,
)
from vendors.models.payments import VendorPayment

__all__ = [
    "DEFAULT_APPROVAL_THRESHOLD",
    "ApprovalPolicy",
    "CertificateRecorded",
    "InsuranceLapse",
    "Invoice",
    "InvoiceApproval",
    "InvoiceDocument",
    "InvoiceEvent",
    "Vendor",
    "VendorAssignment",
    "VendorAssignmentQuerySet",
    "VendorContract",
    "VendorContractQuerySet",
    "VendorPayment",
    "VendorQuerySet",
]
