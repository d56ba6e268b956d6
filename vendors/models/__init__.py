"""Vendors, their contracts with associations (and insurance), and their assignments to
complaints.

Split by concern; every model is importable from ``vendors.models``, as the migrations
name them.
"""

from vendors.models.assignments import VendorAssignment, VendorAssignmentQuerySet
from vendors.models.contracts import (
    InsuranceLapse,
    Vendor,
    VendorContract,
    VendorContractQuerySet,
    VendorQuerySet,
)

__all__ = [
    "InsuranceLapse",
    "Vendor",
    "VendorAssignment",
    "VendorAssignmentQuerySet",
    "VendorContract",
    "VendorContractQuerySet",
    "VendorQuerySet",
]
