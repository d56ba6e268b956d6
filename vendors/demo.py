"""The vendors' part of the demo data (``manage.py seed_demo``). Idempotent.

Contracts with current, past and future windows, with their insurance certificates (one
lapsing within 30 days, one lapsed under a current contract); and, for an association none
of whose complaints has a vendor yet, insured vendors assigned to some of its older open
complaints through the fenced service (real tokens, recorded attempts), half of those then
in progress.
"""

from datetime import timedelta

from django.utils import timezone

from hoa.complaints import workflow
from hoa.models import Complaint, Organization, StaffMembership
from vendors.models import Vendor, VendorAssignment, VendorContract

ASSIGNED_PER_ASSOCIATION = 10


def seed_demo(organizations: dict[str, Organization]) -> None:
    """Vendors under contract with the demo associations: current, past and future windows;
    then some of their open complaints assigned."""
    today = timezone.localdate()
    year, day = timedelta(days=365), timedelta(days=1)
    # name, trade, associations, contract from and to, insurance certificate until
    vendors = [
        ("Pipe Pros Plumbing", "plumbing", ["maple-court", "oak-ridge"], -year, year, year),
        ("Evergreen Landscaping", "landscaping", ["maple-court"], -year, year, 20 * day),
        ("Bright Spark Electric", "electrical", ["maple-court"], -2 * year, -year, -year),
        # Under contract, but its certificate lapsed: it cannot be assigned or paid.
        ("Keystone Masonry", "masonry", ["maple-court"], -year, year, -12 * day),
        ("Summit Roofing", "roofing", ["oak-ridge"], 30 * day, year, year),
        ("Oakline Handyman", "general", ["oak-ridge"], -year, year, year),
    ]
    for name, trade, slugs, starts, ends, insured in vendors:
        vendor, _ = Vendor.objects.get_or_create(name=name, defaults={"trade": trade})
        for slug in slugs:
            if slug in organizations:
                VendorContract.objects.get_or_create(
                    vendor=vendor,
                    organization=organizations[slug],
                    defaults={
                        "starts_on": today + starts,
                        "ends_on": today + ends,
                        "insurance_expires_on": today + insured,
                    },
                )
    for organization in organizations.values():
        _assign_some(organization)


def _assign_some(organization: Organization) -> None:
    # Here, not at the top: the operation's declaration imports this module, and the
    # service imports the declaration.
    from vendors.services import assign_vendor

    if VendorAssignment.objects.filter(complaint__organization=organization).exists():
        return  # assigned before (by a previous run, or by someone trying the demo)
    member = (
        StaffMembership.objects.filter(organization=organization)
        .select_related("user")
        .order_by("user__username")
        .first()
    )
    today = timezone.localdate()
    contracted = [
        contract.vendor
        for contract in VendorContract.objects.active_on(today)
        .filter(organization=organization, insurance_expires_on__gte=today)
        .select_related("vendor")
        .order_by("vendor__name")
    ]
    if member is None or not contracted:
        return
    # Every third of the open complaints opened more than two days ago, oldest first.
    older = (
        Complaint.objects.for_organization(organization)
        .filter(status=Complaint.Status.OPEN, opened_at__lt=timezone.now() - timedelta(days=2))
        .order_by("opened_at", "pk")
    )
    for n, complaint in enumerate(list(older)[::3][:ASSIGNED_PER_ASSOCIATION]):
        vendor = contracted[n % len(contracted)]
        assign_vendor(complaint=complaint, vendor=vendor, actor=member.user, via="seed_demo")
        if n % 2:
            complaint.refresh_from_db()
            workflow.change_status(
                complaint=complaint,
                seen=Complaint.Status.ASSIGNED,
                to=Complaint.Status.IN_PROGRESS,
                note="",
                actor=member.user,
                assigned=True,
            )
