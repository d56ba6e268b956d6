"""Section 2: what the fence costs on top of the write it protects.

Vendor assignment, one new complaint per operation:

- ``plain``: the same row written in a plain ``transaction.atomic()``, no lock (the baseline).
- ``checked``: what the service checks and writes, without lock, fence or audit:
  membership, contract window, the active assignment, the insert — one transaction. It
  splits the overhead into "the checks any correct service makes" and "the fence".
- ``service``: ``vendors.services.assign_vendor`` (validation, lease, fence UPDATE, state
  check, insert, FenceEvent audit row, release). ``VENDOR_DISPATCH_URL`` is unset.

Monthly charges, one new month of an organization with N units per operation (every
variant reads the units, as the service must):

- ``bulk_create``: run row + ``bulk_create`` of the charges + run totals, one transaction.
- ``copy``: the same rows through PostgreSQL ``COPY`` (psycopg ``cursor.copy``): the
  physical floor of the insert.
- ``service_billed``: ``charges.services.generate_monthly_charges`` with its billing call
  (one POST of the 5,000 lines) to a local stand-in that reads it and answers 200: the
  full fenced generation the target is set for.
- ``service``: the same with ``BILLING_WEBHOOK_URL`` unset: the fence's own cost.

Each process times its operations, then counts PostgreSQL round trips (libpq trace) and
Redis commands (MONITOR) over a few more, untimed.
"""

import time
from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone

from bench import fixtures
from bench.environment import start_stand_in
from bench.measure import PgRoundTrips, commandstats, executed_per_op, sent_per_op

# Operations counted (untimed) after the timed ones; counts do not vary between runs.
COUNTED_OPS = 3
COUNTED_CHARGE_RUNS = 1


def _timed_loop(operation, items) -> list[float]:
    samples = []
    for item in items:
        started = time.perf_counter_ns()
        operation(item)
        samples.append((time.perf_counter_ns() - started) / 1000)
    return samples


def _counts(operation, items: list, redis_url: str) -> dict:
    """Round trips and commands per operation: half of ``items`` traced, half monitored."""
    counted = len(items) // 2
    with PgRoundTrips(connection) as trips:
        for item in items[:counted]:
            operation(item)
    rest = iter(items[counted:])
    sent = sent_per_op(redis_url, lambda: operation(next(rest)), counted)
    per_op = trips.per_op(counted)
    return {
        "db_round_trips": per_op["round_trips"],
        "db_statements": per_op["statements"],
        "redis_sent": sent,
        "redis_sent_total": round(sum(sent.values()), 3),
    }


# -- vendor assignment ----------------------------------------------------------------------


def _vendor_operation(variant: str, *, vendor, actor):
    from hoa.models import Complaint
    from vendors.models import VendorAssignment, VendorContract

    if variant == "plain":

        def plain(complaint) -> None:
            with transaction.atomic():
                VendorAssignment.objects.create(
                    complaint=complaint,
                    vendor=vendor,
                    fence_token=1,
                    assigned_by=actor,
                    actor_label=actor.username,
                )

        return plain

    if variant == "checked":

        def checked(complaint) -> None:
            organization = complaint.organization
            if not (organization.has_staff(actor) and actor.has_perm("vendors.assign_vendor")):
                raise PermissionError(actor.username)
            today = timezone.localdate()
            if not VendorContract.objects.filter(
                vendor=vendor, organization=organization, starts_on__lte=today, ends_on__gte=today
            ).exists():
                raise ValueError("no active contract")
            with transaction.atomic():
                Complaint.objects.select_for_update().filter(pk=complaint.pk).first()
                if complaint.assignments.filter(active=True).exists():
                    raise ValueError("already assigned")
                VendorAssignment.objects.create(
                    complaint=complaint,
                    vendor=vendor,
                    fence_token=1,
                    assigned_by=actor,
                    actor_label=actor.username,
                )

        return checked

    if variant == "service":
        from vendors.services import assign_vendor

        def service(complaint) -> None:
            assign_vendor(complaint=complaint, vendor=vendor, actor=actor)

        return service
    raise ValueError(f"unknown variant {variant!r}")


def vendor(*, variant: str, redis_url: str, ops: int, warmup: int = 10) -> dict:
    """Assign a vendor to ``ops`` new complaints; time each assignment."""
    import redis

    from hoa.models import Complaint
    from vendors.models import VendorAssignment

    org = fixtures.organization("bench-vendor")
    actor = fixtures.staff_user("bench-vendor-staff", org)
    chosen = fixtures.vendors_with_contracts(org, 1)[0]
    label = fixtures.unique_label(f"vendor-{variant}")
    rows = fixtures.complaints(org, warmup + ops + 2 * COUNTED_OPS, title=label)
    # As a view would have it: the complaint and its organization in hand.
    complaints = list(
        Complaint.objects.filter(pk__in=[r.pk for r in rows])
        .select_related("organization")
        .order_by("pk")
    )
    operation = _vendor_operation(variant, vendor=chosen, actor=actor)
    for complaint in complaints[:warmup]:
        operation(complaint)
    timed = complaints[warmup : warmup + ops]
    client = redis.Redis.from_url(redis_url)
    before = commandstats(client)
    samples = _timed_loop(operation, timed)
    executed = executed_per_op(before, commandstats(client), ops)
    counts = _counts(operation, complaints[warmup + ops :], redis_url)
    counts["redis_executed"] = executed
    active = VendorAssignment.objects.filter(complaint__in=complaints, active=True).count()
    return {
        "samples_us": samples,
        "counts": counts,
        "invariants": [
            {
                "name": "one active assignment per complaint",
                "ok": active == len(complaints),
                "detail": f"{active} active assignments for {len(complaints)} complaints",
            }
        ],
    }


# -- monthly charges ------------------------------------------------------------------------


def _unit_rows(org) -> list[tuple[int, Decimal]]:
    from hoa.models import Unit

    return list(
        Unit.objects.for_organization(org).order_by("label").values_list("pk", "monthly_assessment")
    )


def _complete(run, rows) -> None:
    run.status = run.Status.COMPLETED
    run.total = sum((amount for _, amount in rows), Decimal("0.00"))
    run.charge_count = len(rows)
    run.completed_at = timezone.now()
    run.completed_by = "bench"
    run.save(update_fields=["status", "total", "charge_count", "completed_at", "completed_by"])


def _charges_operation(variant: str, *, org, actor):
    from charges.models import MonthlyCharge, MonthlyChargeRun

    if variant == "bulk_create":

        def bulk(month) -> None:
            rows = _unit_rows(org)
            now = timezone.now()
            with transaction.atomic():
                run = MonthlyChargeRun.objects.create(organization=org, month=month)
                MonthlyCharge.objects.bulk_create(
                    [
                        MonthlyCharge(run=run, unit_id=pk, amount=amount, created_at=now)
                        for pk, amount in rows
                    ]
                )
                _complete(run, rows)

        return bulk

    if variant == "copy":
        table = MonthlyCharge._meta.db_table

        def copy(month) -> None:
            rows = _unit_rows(org)
            now = timezone.now()
            with transaction.atomic():
                run = MonthlyChargeRun.objects.create(organization=org, month=month)
                # The Django connection's own psycopg connection: same transaction.
                with (
                    connection.connection.cursor() as cursor,
                    cursor.copy(
                        f"COPY {table} (run_id, unit_id, amount, created_at) FROM STDIN"
                    ) as copier,
                ):
                    for pk, amount in rows:
                        copier.write_row((run.pk, pk, amount, now))
                _complete(run, rows)

        return copy

    if variant in ("service", "service_billed"):
        from django.conf import settings

        from charges.services import generate_monthly_charges

        # This worker process runs this one variant: the setting is its own.
        settings.BILLING_WEBHOOK_URL = (
            start_stand_in("billing")[1] if variant == "service_billed" else ""
        )

        def service(month) -> None:
            generate_monthly_charges(organization=org, month=month, actor=actor)

        return service
    raise ValueError(f"unknown variant {variant!r}")


def charges(*, variant: str, redis_url: str, units: int, ops: int, warmup: int = 1) -> dict:
    """Generate ``ops`` new months of charges for an organization of ``units`` units."""
    import redis

    from charges.models import MonthlyCharge, MonthlyChargeRun

    org = fixtures.organization(f"bench-charges-{units}", units=units)
    actor = fixtures.staff_user("bench-charges-staff", org)
    fixtures.fresh_runs(org, 0)  # every month of this organization is new again
    months = [fixtures.month(n) for n in range(warmup + ops + 2 * COUNTED_CHARGE_RUNS)]
    operation = _charges_operation(variant, org=org, actor=actor)
    for month in months[:warmup]:
        operation(month)
    client = redis.Redis.from_url(redis_url)
    before = commandstats(client)
    samples = _timed_loop(operation, months[warmup : warmup + ops])
    executed = executed_per_op(before, commandstats(client), ops)
    counts = _counts(operation, months[warmup + ops :], redis_url)
    counts["redis_executed"] = executed
    runs = MonthlyChargeRun.objects.filter(organization=org).completed().count()
    charged = MonthlyCharge.objects.filter(run__organization=org).count()
    return {
        "samples_us": samples,
        "counts": counts,
        "invariants": [
            {
                "name": "one completed run per month, one charge per unit",
                "ok": runs == len(months) and charged == len(months) * units,
                "detail": f"{runs} runs, {charged} charges for {len(months)} months "
                f"x {units} units",
            }
        ],
    }


# -- every organization, one or two worker processes ----------------------------------------


def all_orgs(*, workers: int, orgs: int, units: int) -> dict:
    """Run ``generate_monthly_charges --all-orgs --workers N`` for a new month; time the walk.

    Timed in-process around ``call_command`` (the command forks its workers itself), so
    interpreter start-up is not part of either number.
    """
    import hashlib
    import io

    from django.core.management import call_command

    from charges.models import MonthlyCharge, MonthlyChargeRun
    from hoa.models import Organization

    slugs = [f"bench-all-{n:03d}" for n in range(orgs)]
    members = [fixtures.organization(slug, units=units) for slug in slugs]
    actor = fixtures.staff_user("bench-all-orgs", members[0])
    for org in members[1:]:
        fixtures.staff_membership(actor, org)
    used = MonthlyChargeRun.objects.filter(organization__in=members).order_by("-month").first()
    # From 2101 on: months no other case uses, so the check below may look at the whole month.
    month = fixtures.next_month(used.month if used else None, first=1200)
    connection.close()

    started = time.perf_counter_ns()
    call_command(
        "generate_monthly_charges",
        all_orgs=True,
        month=f"{month:%Y-%m}",
        actor=actor.username,
        workers=workers,
        stdout=io.StringIO(),
    )
    elapsed = (time.perf_counter_ns() - started) / 1000

    runs = MonthlyChargeRun.objects.filter(organization__in=members, month=month).completed()
    charges = MonthlyCharge.objects.filter(run__in=runs)
    rows = sorted(
        charges.values_list("run__organization__slug", "unit__label", "amount").iterator()
    )
    digest = hashlib.sha256(repr([(s, u, str(a)) for s, u, a in rows]).encode()).hexdigest()
    outsiders = MonthlyChargeRun.objects.filter(month=month).exclude(organization__in=members)
    return {
        "samples_us": [elapsed],
        "metrics": {
            "orgs_per_s": round(orgs / (elapsed / 1e6), 1),
            "seconds": round(elapsed / 1e6, 2),
            "result_digest": digest[:16],
        },
        "invariants": [
            {
                "name": "every organization billed once, one charge per unit",
                "ok": runs.count() == orgs
                and len(rows) == orgs * units
                and not outsiders.exists()
                and Organization.objects.filter(slug__in=slugs).count() == orgs,
                "detail": f"{runs.count()} runs, {len(rows)} charges for {orgs} x {units} units",
            }
        ],
    }
