"""Demo data for local development (``manage.py seed_demo``). Idempotent."""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.utils import timezone

from hoa.models import Complaint, Notice, Organization, StaffMembership, Unit
from hoa.operations import operations, staff_permissions

DEMO_PASSWORD = "hoa-demo-2026"  # noqa: S105 - printed on purpose; local demo only
STAFF_GROUP = "Association staff"

# Permissions every association's staff needs: read everything; the fenced operations add
# theirs (``Operation.staff_permissions``).
STAFF_PERMISSIONS = [
    ("hoa", "view_organization"),
    ("hoa", "view_unit"),
    ("hoa", "view_complaint"),
    ("hoa", "add_complaint"),
    ("hoa", "change_complaint"),
    ("hoa", "view_notice"),
    ("hoa", "add_notice"),
    ("hoa", "change_notice"),
]

ORGANIZATIONS = [
    ("maple-court", "Maple Court", "alice", 36, Decimal("245.00")),
    ("oak-ridge", "Oak Ridge", "omar", 24, Decimal("310.00")),
]

COMPLAINTS = [
    ("Leaking pipe in the laundry room", Complaint.Priority.HIGH),
    ("Broken gate latch at the east entrance", Complaint.Priority.NORMAL),
    ("Overflowing recycling bins", Complaint.Priority.LOW),
    ("Flickering light in the parking garage", Complaint.Priority.NORMAL),
    ("Noise from the rooftop unit", Complaint.Priority.LOW),
    ("Water stain on the lobby ceiling", Complaint.Priority.HIGH),
]


@dataclass
class Login:
    username: str
    password: str
    role: str


def staff_group() -> Group:
    group, _ = Group.objects.get_or_create(name=STAFF_GROUP)
    names = [*STAFF_PERMISSIONS, *(name.split(".", 1) for name in staff_permissions())]
    perms = [
        Permission.objects.get(content_type__app_label=app, codename=codename)
        for app, codename in names
    ]
    group.permissions.set(perms)
    return group


def _user(username: str, *, superuser: bool = False):
    user, _ = get_user_model().objects.get_or_create(username=username)
    user.is_staff = True
    user.is_superuser = superuser
    user.email = f"{username}@example.org"
    user.set_password(DEMO_PASSWORD)
    user.save()
    return user


@transaction.atomic
def seed_demo() -> list[Login]:
    """Create or refresh the demo organizations, units, staff and complaints, then each
    fenced operation's demo data."""
    group = staff_group()
    logins = [Login("admin", DEMO_PASSWORD, "superuser, all associations")]
    _user("admin", superuser=True)
    orgs = {}
    for slug, name, staff_name, unit_count, assessment in ORGANIZATIONS:
        org, _ = Organization.objects.update_or_create(slug=slug, defaults={"name": name})
        orgs[slug] = org
        for number in range(1, unit_count + 1):
            Unit.objects.update_or_create(
                organization=org,
                label=f"{100 + number}",
                defaults={"monthly_assessment": assessment + Decimal(number % 3) * 15},
            )
        staff = _user(staff_name)
        staff.groups.add(group)
        StaffMembership.objects.get_or_create(user=staff, organization=org)
        logins.append(Login(staff_name, DEMO_PASSWORD, f"staff of {name}"))
        units = list(org.units.order_by("label")[: len(COMPLAINTS)])
        for (title, priority), unit in zip(COMPLAINTS, units, strict=True):
            if not Complaint.objects.filter(organization=org, title=title).exists():
                Complaint.objects.create(
                    organization=org,
                    unit=unit,
                    title=title,
                    priority=priority,
                    opened_at=timezone.now() - timedelta(hours=30),
                )
        Notice.objects.get_or_create(
            organization=org,
            title="Annual meeting",
            defaults={
                "body": f"The annual meeting of {name} is on the first Monday of next month.",
                "publish_at": timezone.now() + timedelta(days=1),
            },
        )
    for operation in operations():
        if operation.seed_demo is not None:
            operation.seed_demo(orgs)
    return logins
