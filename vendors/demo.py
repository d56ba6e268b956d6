"""The vendors' part of the demo data (``manage.py seed_demo``). Idempotent."""

from datetime import timedelta

from django.utils import timezone

from hoa.models import Organization
from vendors.models import Vendor, VendorContract


def seed_demo(organizations: dict[str, Organization]) -> None:
    """Vendors under contract with the demo associations: current, past and future windows."""
    today = timezone.localdate()
    year = timedelta(days=365)
    vendors = [
        ("Pipe Pros Plumbing", "plumbing", ["maple-court", "oak-ridge"], -year, year),
        ("Evergreen Landscaping", "landscaping", ["maple-court"], -year, year),
        ("Bright Spark Electric", "electrical", ["maple-court"], -2 * year, -year),
        ("Summit Roofing", "roofing", ["oak-ridge"], timedelta(days=30), year),
        ("Oakline Handyman", "general", ["oak-ridge"], -year, year),
    ]
    for name, trade, slugs, starts, ends in vendors:
        vendor, _ = Vendor.objects.update_or_create(name=name, defaults={"trade": trade})
        for slug in slugs:
            if slug in organizations:
                VendorContract.objects.update_or_create(
                    vendor=vendor,
                    organization=organizations[slug],
                    defaults={"starts_on": today + starts, "ends_on": today + ends},
                )
