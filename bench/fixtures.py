"""Data the cases work on, in the bench database. Each function is idempotent on its
natural key; rows a case consumes (runs, complaints) are new per process, uniquely labelled."""

import os
from datetime import date, timedelta
from decimal import Decimal
from functools import cache
from importlib import import_module

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.hashers import make_password
from django.db import transaction
from django.utils import timezone

from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.demo import staff_group
from hoa.models import Complaint, Organization, StaffMembership, Unit
from locking import unfenced_writes
from vendors.models import Invoice, Vendor, VendorAssignment, VendorContract

BENCH_PASSWORD = "bench-password-not-secret"
TTL = timedelta(seconds=30)  # a case's leases: longer than any of its steps


def unique_label(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{os.urandom(3).hex()}"


def organization(slug: str, *, units: int = 0) -> Organization:
    """The organization ``slug`` with at least ``units`` units (assessments vary a little)."""
    org, _ = Organization.objects.get_or_create(slug=slug, defaults={"name": slug})

    def unit(n: int) -> Unit:
        return Unit(organization=org, label=f"U{n:05d}", monthly_assessment=Decimal(150 + n % 100))

    Unit.objects.bulk_create(map(unit, range(org.units.count() + 1, units + 1)), batch_size=2000)
    return org


@cache
def password_hash() -> str:
    """The bench password, hashed once per process (PBKDF2 is slow on purpose)."""
    return make_password(BENCH_PASSWORD)


def staff_user(username: str, org: Organization):
    user, created = get_user_model().objects.get_or_create(
        username=username, defaults={"is_staff": True, "password": password_hash}
    )
    if created:
        user.groups.add(staff_group())
    StaffMembership.objects.get_or_create(user=user, organization=org)
    return user


def session_key(user) -> str:
    """A logged-in session of ``user``, written as ``force_login`` writes it (no PBKDF2)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store.update({SESSION_KEY: str(user.pk), HASH_SESSION_KEY: user.get_session_auth_hash(),
                  BACKEND_SESSION_KEY: settings.AUTHENTICATION_BACKENDS[0]})  # fmt: skip
    store.save()
    return store.session_key


def vendors_with_contracts(org: Organization, count: int) -> list:
    today, year = timezone.localdate(), timedelta(days=365)
    # Insured: an uninsured vendor is neither assigned nor paid (vendors.insurance).
    window = {"starts_on": today - year, "ends_on": today + year,
              "insurance_expires_on": today + year}  # fmt: skip
    found = []
    for number in range(1, count + 1):
        name, trade = f"{org.slug} vendor {number}", {"trade": "plumbing"}
        vendor, _ = Vendor.objects.get_or_create(name=name, defaults=trade)
        VendorContract.objects.get_or_create(vendor=vendor, organization=org, defaults=window)
        found.append(vendor)
    return found


def complaints(org: Organization, count: int, *, title: str) -> list[Complaint]:
    now = timezone.now()
    due = now + timedelta(hours=org.sla_hours_normal)
    return Complaint.objects.bulk_create(
        Complaint(organization=org, title=f"{title} {n}", opened_at=now, sla_due_at=due)
        for n in range(count)
    )


def approved_invoices(org: Organization, count: int, *, vendor, label: str) -> list[Invoice]:
    """``count`` new invoices of ``vendor`` (under contract, insured), approved, owed by ``org``."""
    [complaint] = complaints(org, 1, title=label)
    assignment = VendorAssignment.objects.create(complaint=complaint, vendor=vendor, fence_token=1)
    today = timezone.localdate()
    return Invoice.objects.bulk_create(
        Invoice(organization=org, assignment=assignment, vendor=vendor, number=f"{label}-{n}",
                amount=Decimal("250.00"), issued_on=today, due_on=today + timedelta(days=30),
                status=Invoice.Status.APPROVED)
        for n in range(count)
    )  # fmt: skip


def month(number: int) -> date:
    return date(2001 + number // 12, number % 12 + 1, 1)


@transaction.atomic
def fresh_runs(org: Organization, count: int) -> list:
    MonthlyCharge.objects.filter(run__organization=org).delete()
    with unfenced_writes():  # the runs' table is strict: a fixture says it writes unfenced
        MonthlyChargeRun.objects.filter(organization=org).delete()
    return MonthlyChargeRun.objects.bulk_create(
        MonthlyChargeRun(organization=org, month=month(n)) for n in range(count)
    )
