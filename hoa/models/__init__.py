"""Core models: organizations, their units and staff, complaints and notices.

One module per concern; every model is importable from ``hoa.models``, as Django and the
migrations name them.
"""

from hoa.models.complaints import Complaint, ComplaintEvent, ComplaintQuerySet
from hoa.models.denials import AccessDenial
from hoa.models.notices import Notice
from hoa.models.organizations import (
    Organization,
    StaffMembership,
    Unit,
    default_time_zone,
    scope_for_organization,
    validate_time_zone,
)
from hoa.models.outside_calls import OutsideCall, record_unknown
from hoa.models.reporter_emails import ReporterEmail

__all__ = [
    "AccessDenial",
    "Complaint",
    "ComplaintEvent",
    "ComplaintQuerySet",
    "Notice",
    "Organization",
    "OutsideCall",
    "ReporterEmail",
    "StaffMembership",
    "Unit",
    "default_time_zone",
    "record_unknown",
    "scope_for_organization",
    "validate_time_zone",
]
