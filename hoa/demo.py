"""Demo data for local development (``manage.py seed_demo``): the README's logins, two
associations with their units, notices and complaints, then each fenced operation's own.

Deterministic and idempotent: a second run finds every row in place and changes nothing
(``SeedResult.created`` is 0); a password someone changed is set back to the demo one.
"""

import unicodedata
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.utils import timezone

from hoa.complaints import workflow
from hoa.models import Complaint, ComplaintEvent, Notice, Organization, StaffMembership, Unit
from hoa.operations import every_pages, staff_permissions
from hoa.security.permissions import OPERATOR_PERMISSIONS

DEMO_PASSWORD = "hoa-demo-2026"  # noqa: S105 - printed on purpose; local demo only
STAFF_GROUP = "Association staff"
OPERATORS_GROUP = "Operators"

# Permissions every association's staff needs: read everything; the fenced operations add
# theirs (``Pages.staff_permissions``).
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

P = Complaint.Priority
S = Complaint.Status


@dataclass(frozen=True)
class DemoOrganization:
    slug: str
    name: str
    units: int
    assessment: Decimal
    staff: tuple[str, ...]
    complaints: int  # besides the six every association starts with


ORGANIZATIONS = [
    DemoOrganization("maple-court", "Maple Court", 36, Decimal("245.00"), ("alice", "bob"), 58),
    DemoOrganization("oak-ridge", "Oak Ridge", 24, Decimal("310.00"), ("omar",), 6),
]
OPERATOR = "olivia"  # staff of every demo association, and an operator

# The six complaints every association starts with (open, opened 30 hours ago).
COMPLAINTS = [
    ("Leaking pipe in the laundry room", P.HIGH),
    ("Broken gate latch at the east entrance", P.NORMAL),
    ("Overflowing recycling bins", P.LOW),
    ("Flickering light in the parking garage", P.NORMAL),
    ("Noise from the rooftop unit", P.LOW),
    ("Water stain on the lobby ceiling", P.HIGH),
]

# The rest are made from these: a problem and a place (a unit, or a common area).
PROBLEMS = [
    "Dripping faucet",
    "Clogged drain",
    "No hot water",
    "Heating not working",
    "Window will not close",
    "Door buzzer silent",
    "Mould on the wall",
    "Loose handrail",
    "Pest sighting",
    "Cracked floor tile",
    "Smoke detector beeping",
    "Graffiti on the wall",
]
PLACES = [
    "in unit {unit}",
    "in the north stairwell",
    "at the pool",
    "in the gym",
    "at the mailboxes",
    "in the bike room",
    "by the playground",
    "on the roof deck",
]
REPORTERS = [
    ("Ana Ruiz", "555-0142"),
    ("Ben Okafor", ""),
    ("Chloé Martin", "555-0178"),
    ("Dmitri Volkov", ""),
    ("Erin O'Neill", "555-0111"),
    ("Farah Haddad", "555-0190"),
    ("Gustavo Lima", ""),
    ("Hana Sato", "555-0123"),
    ("Ines Duarte", ""),
    ("Jonas Berg", "555-0166"),
]
PRIORITIES = [P.HIGH, P.NORMAL, P.NORMAL, P.LOW, P.NORMAL, P.HIGH, P.LOW]
# Out of every ten: six stay open (an operation's demo may act on them), two resolved,
# two closed.
STATUSES = [S.OPEN, S.OPEN, S.RESOLVED, S.OPEN, S.CLOSED, S.OPEN, S.OPEN, S.RESOLVED]
STATUSES += [S.OPEN, S.CLOSED]


@dataclass
class Login:
    username: str
    password: str
    role: str


@dataclass
class SeedResult:
    logins: list[Login] = field(default_factory=list)
    created: int = 0  # rows the run added, over every model
    passwords_reset: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.passwords_reset)


def staff_group() -> Group:
    group, _ = Group.objects.get_or_create(name=STAFF_GROUP)
    names = [*STAFF_PERMISSIONS, *(name.split(".", 1) for name in staff_permissions())]
    group.permissions.set(_permissions(names))
    return group


def operators_group() -> Group:
    """Locking's permissions (hoa.security.permissions): leases, tokens, breaking a lease."""
    group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
    group.permissions.set(_permissions(name.split(".", 1) for name in OPERATOR_PERMISSIONS))
    return group


def _permissions(names) -> list[Permission]:
    return [
        Permission.objects.get(content_type__app_label=app, codename=codename)
        for app, codename in names
    ]


def _user(username: str, result: SeedResult, *, superuser: bool = False):
    user, created = get_user_model().objects.get_or_create(
        username=username,
        defaults={"is_staff": True, "is_superuser": superuser, "email": f"{username}@example.org"},
    )
    if created or not user.check_password(DEMO_PASSWORD):
        user.set_password(DEMO_PASSWORD)
        user.save(update_fields=["password"])
        result.passwords_reset += not created
    return user


def _row_count() -> int:
    """Rows of every model: what a run added (the demo only adds, never rewrites)."""
    return sum(model._default_manager.count() for model in apps.get_models())


def seed_demo() -> SeedResult:
    """Create what is missing of the demo associations, staff and complaints, then of
    each fenced operation's demo data; return the logins and what the run added."""
    result = SeedResult()
    before = _row_count()
    with transaction.atomic():
        organizations = _seed_frame(result)
    # Outside the frame's transaction: an operation's demo may run its fenced service,
    # which opens its own.
    for pages in every_pages():
        if pages.seed_demo is not None:
            pages.seed_demo(organizations)
    result.created = _row_count() - before
    return result


def _seed_frame(result: SeedResult) -> dict[str, Organization]:
    staff = staff_group()
    result.logins.append(Login("admin", DEMO_PASSWORD, "superuser, all associations"))
    _user("admin", result, superuser=True)
    organizations = {}
    for demo in ORGANIZATIONS:
        organization, _ = Organization.objects.get_or_create(
            slug=demo.slug, defaults={"name": demo.name}
        )
        organizations[demo.slug] = organization
        for number in range(1, demo.units + 1):
            Unit.objects.get_or_create(
                organization=organization,
                label=f"{100 + number}",
                defaults={"monthly_assessment": demo.assessment + Decimal(number % 3) * 15},
            )
        members = []
        for username in demo.staff:
            member = _user(username, result)
            member.groups.add(staff)
            StaffMembership.objects.get_or_create(user=member, organization=organization)
            members.append(member)
            result.logins.append(Login(username, DEMO_PASSWORD, f"staff of {demo.name}"))
        _seed_complaints(organization, demo, members)
        Notice.objects.get_or_create(
            organization=organization,
            title="Annual meeting",
            defaults={
                "body": f"The annual meeting of {demo.name} is on the first Monday of next month.",
                "publish_at": timezone.now() + timedelta(days=1),
            },
        )
    operator = _user(OPERATOR, result)
    operator.groups.add(staff, operators_group())
    for organization in organizations.values():
        StaffMembership.objects.get_or_create(user=operator, organization=organization)
    result.logins.append(
        Login(OPERATOR, DEMO_PASSWORD, "operator: locks, breaking a lease; staff of both")
    )
    return organizations


def demo_complaints(demo: DemoOrganization, unit_labels: list[str]) -> list[dict]:
    """The association's demo complaints, the same every time: title, unit label (or
    ``None``), priority, status, reporter, and how many hours ago it was opened."""
    rows = [
        {
            "title": title,
            "unit": unit_labels[index],
            "priority": priority,
            "status": S.OPEN,
            "reporter": REPORTERS[index % len(REPORTERS)],
            "hours_ago": 30,
        }
        for index, (title, priority) in enumerate(COMPLAINTS)
    ]
    # Each (problem, place) once, in an order that varies both (a stride prime to 96).
    pairs = [(problem, place) for place in PLACES for problem in PROBLEMS]
    for n in range(demo.complaints):
        problem, place = pairs[(n * 37) % len(pairs)]
        unit = unit_labels[(n * 7 + 3) % len(unit_labels)] if "{unit}" in place else None
        rows.append(
            {
                "title": f"{problem} {place.format(unit=unit)}",
                "unit": unit,
                "priority": PRIORITIES[n % len(PRIORITIES)],
                "status": STATUSES[n % len(STATUSES)],
                "reporter": REPORTERS[(n * 3 + 1) % len(REPORTERS)],
                # From 2 hours to 20 days ago: the high and normal ones of more than a day
                # or three are past their SLA while open.
                "hours_ago": 2 + (n * 53) % 478,
            }
        )
    return rows


def _seed_complaints(organization: Organization, demo: DemoOrganization, members: list) -> None:
    units = {unit.label: unit for unit in organization.units.all()}
    existing = set(organization.complaints.values_list("title", flat=True))
    now = timezone.now()
    for n, row in enumerate(demo_complaints(demo, sorted(units))):
        if row["title"] in existing:
            continue
        actor = members[n % len(members)]
        name, phone = row["reporter"]
        complaint = workflow.open_complaint(
            organization=organization,
            unit=units[row["unit"]] if row["unit"] else None,
            title=row["title"],
            description=f"{row['title']}, reported by {name}.",
            priority=row["priority"],
            reporter=workflow.Reporter(name, _email(name), phone),
            actor=actor,
        )
        opened = now - timedelta(hours=row["hours_ago"])
        due = opened + timedelta(hours=organization.sla_hours_for(row["priority"]))
        Complaint.objects.filter(pk=complaint.pk).update(opened_at=opened, sla_due_at=due)
        ComplaintEvent.objects.filter(complaint=complaint).update(at=opened)
        complaint.refresh_from_db()
        if row["status"] != S.OPEN:
            note = "Fixed on site." if row["status"] == S.RESOLVED else "A duplicate."
            workflow.change_status(
                complaint=complaint,
                seen=S.OPEN,
                to=row["status"],
                note=note,
                actor=actor,
                assigned=False,
            )


def _email(name: str) -> str:
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return f"{ascii_name.lower().replace(' ', '.').replace(chr(39), '')}@example.org"
