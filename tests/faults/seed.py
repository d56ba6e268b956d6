"""The data the scenarios work on: two associations, staff users, vendors, complaints.

``seed_world()`` runs inside a Django process (the harness's child ``python -m
tests.faults.seed`` under ``make faults``; the test process itself in the pytest subset)
and returns a ``World``: plain ids and names, JSON-serialisable, so the harness can hand
it across processes. Every staff user gets a logged-in session created here, so clients
skip the login form (its password hashing would dominate a load run and is not what the
suite tests).
"""

import json
import sys
import threading
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from decimal import Decimal

USER_PREFIX = "faults-"
ORGANIZATIONS = [
    # slug, name, units, complaints
    ("faults-maple", "Faults Maple", 6, 480),
    ("faults-oak", "Faults Oak", 3, 60),
]
VENDORS = ["Faults Plumbing", "Faults Electric", "Faults Roofing", "Faults Gardening"]
FIRST_MONTH = date(1990, 1, 1)
_TAKING = threading.Lock()  # scenarios take months and complaints from several threads


@dataclass
class World:
    organizations: dict[str, dict]  # slug -> {"id": int, "units": int}
    users: list[str]
    sessions: dict[str, str]  # username -> session key
    vendors: list[int]
    complaints: dict[str, list[int]]  # slug -> complaint ids
    # Allocation cursors: every scenario takes fresh months and complaints.
    _next_month: dict[str, int] = field(default_factory=dict)
    _next_complaint: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str) -> "World":
        return cls(**json.loads(text))

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def org_id(self, slug: str) -> int:
        return self.organizations[slug]["id"]

    def units(self, slug: str) -> int:
        return self.organizations[slug]["units"]

    def take_month(self, slug: str) -> str:
        """A month of ``slug`` that no scenario has used yet, as ``YYYY-MM``: none taken
        from this world, and none with a run in the database (another world's, such as the
        warm-up's, whose rows a test that runs first finds)."""
        from charges.models import MonthlyChargeRun

        while True:
            with _TAKING:
                index = self._next_month.get(slug, 0)
                self._next_month[slug] = index + 1
            months = FIRST_MONTH.year * 12 + FIRST_MONTH.month - 1 + index
            month = date(months // 12, months % 12 + 1, 1)
            used = MonthlyChargeRun.objects.filter(organization__slug=slug, month=month)
            if not used.exists():
                return f"{month:%Y-%m}"

    def approved_invoice(self, slug: str) -> int:
        """A fresh approved invoice of ``slug``: one of its vendors sent to a complaint no
        scenario used (written as the fenced assignment writes it), then the invoice,
        approved, as the workflow leaves it."""
        from decimal import Decimal

        from django.db import transaction
        from django.utils import timezone

        from hoa.models import Complaint
        from vendors.models import Invoice, VendorAssignment

        complaint = self.take_complaint(slug)
        vendor = self.vendors[complaint % len(self.vendors)]
        today = timezone.localdate()
        with transaction.atomic():
            Complaint.objects.filter(pk=complaint).update(last_fence_token=1)
            assignment = VendorAssignment.objects.create(
                complaint_id=complaint, vendor_id=vendor, fence_token=1
            )
            invoice = Invoice.objects.create(
                organization_id=self.org_id(slug),
                assignment=assignment,
                vendor_id=vendor,
                number=f"F-{complaint}",
                amount=Decimal("100.00") + complaint % 50,
                issued_on=today,
                due_on=today,
                status=Invoice.Status.APPROVED,
                version=2,
            )
        return invoice.pk

    def take_complaint(self, slug: str) -> int:
        """A complaint of ``slug`` that no scenario has used yet."""
        with _TAKING:
            index = self._next_complaint.get(slug, 0)
            pool = self.complaints[slug]
            if index >= len(pool):
                raise RuntimeError(f"no fresh complaints left in {slug}")
            self._next_complaint[slug] = index + 1
        return pool[index]


def seed_world(*, users: int = 24) -> World:
    """Create (or find) the associations, users, vendors and complaints; open sessions."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from hoa.demo import staff_group
    from hoa.models import Complaint, Organization, StaffMembership, Unit
    from vendors.models import Vendor, VendorContract

    today = timezone.localdate()
    with transaction.atomic():
        group = staff_group()
        organizations, complaint_ids = {}, {}
        for slug, name, unit_count, complaint_count in ORGANIZATIONS:
            org, _ = Organization.objects.get_or_create(slug=slug, defaults={"name": name})
            for number in range(1, unit_count + 1):
                Unit.objects.get_or_create(
                    organization=org,
                    label=f"F{number:03d}",
                    defaults={"monthly_assessment": Decimal("100.00") + number},
                )
            missing = complaint_count - Complaint.objects.filter(organization=org).count()
            now = timezone.now()
            Complaint.objects.bulk_create(
                Complaint(
                    organization=org,
                    title=f"Fault-suite complaint {index}",
                    opened_at=now,
                    sla_due_at=now + timedelta(days=3),
                )
                for index in range(max(missing, 0))
            )
            organizations[slug] = {"id": org.pk, "units": unit_count}
            complaint_ids[slug] = list(
                Complaint.objects.filter(organization=org)
                .order_by("pk")
                .values_list("pk", flat=True)
            )
        vendor_ids = []
        for name in VENDORS:
            vendor, _ = Vendor.objects.get_or_create(name=name, defaults={"trade": "general"})
            vendor_ids.append(vendor.pk)
            for slug in organizations:
                contract, _ = VendorContract.objects.get_or_create(
                    vendor=vendor,
                    organization_id=organizations[slug]["id"],
                    defaults={
                        "starts_on": today - timedelta(days=365),
                        "ends_on": today + timedelta(days=365),
                        "insurance_expires_on": today + timedelta(days=365),
                    },
                )
                # A world seeded before certificates were kept, or one that ran out since:
                # insured vendors, or their assignments and payments would be refused.
                if (contract.insurance_expires_on or today) <= today + timedelta(days=30):
                    contract.insurance_expires_on = today + timedelta(days=365)
                    contract.save(update_fields=["insurance_expires_on"])
        usernames = []
        for number in range(users):
            username = f"{USER_PREFIX}{number:02d}"
            user, created = get_user_model().objects.get_or_create(
                username=username, defaults={"is_staff": True}
            )
            if created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            user.groups.add(group)
            for slug in organizations:
                StaffMembership.objects.get_or_create(
                    user=user, organization_id=organizations[slug]["id"]
                )
            usernames.append(username)
    return World(
        organizations=organizations,
        users=usernames,
        sessions=open_sessions(usernames),
        vendors=vendor_ids,
        complaints=complaint_ids,
    )


def open_sessions(usernames: list[str]) -> dict[str, str]:
    """Create a logged-in database session per user, as ``login()`` would; return the keys."""
    from django.conf import settings
    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )
    from django.contrib.sessions.backends.db import SessionStore

    sessions = {}
    for user in get_user_model().objects.filter(username__in=usernames):
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.create()
        sessions[user.username] = store.session_key
    return sessions


def main() -> None:
    import django

    django.setup()
    users = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    sys.stdout.write(seed_world(users=users).to_json() + "\n")


if __name__ == "__main__":
    main()
