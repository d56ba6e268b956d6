"""Section 2: what the fence costs on top of the write it protects.

``vendor``: one vendor assignment on a new complaint: a ``plain`` insert, the same
``checked`` as the service checks without lock, fence or audit, and the ``service``
(``assign_vendor``). ``charges``: a new month of charges for N units: ``bulk_create``,
``copy`` (the insert's floor), the ``service`` (``generate_monthly_charges``) without and
(``service_billed``) with its billing call to a local stand-in. ``all_orgs``: the
``--all-orgs`` command with 1 or 2 workers. Each process times its operations, then counts
round trips and Redis commands over a few more, untimed (docs/benchmarks.md).
"""

import time
from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone

from bench import fixtures
from bench.environment import start_stand_in
from bench.measure import check, time_and_count

# Operations counted (untimed) after the timed ones; counts do not vary between runs.
COUNTED_OPS = 3
COUNTED_CHARGE_RUNS = 1


# -- vendor assignment ----------------------------------------------------------------------


def _vendor_operation(variant: str, *, vendor, actor):
    from hoa.models import Complaint
    from vendors.models import VendorAssignment, VendorContract

    def insert(complaint) -> None:
        VendorAssignment.objects.create(
            complaint=complaint,
            vendor=vendor,
            fence_token=1,
            assigned_by=actor,
            actor_label=actor.username,
        )

    if variant == "plain":

        def plain(complaint) -> None:
            with transaction.atomic():
                insert(complaint)

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
                insert(complaint)

        return checked

    if variant == "service":
        from vendors.services import assign_vendor

        def service(complaint) -> None:
            assign_vendor(complaint=complaint, vendor=vendor, actor=actor)

        return service
    raise ValueError(f"unknown variant {variant!r}")


def vendor(*, variant: str, redis_url: str, ops: int, warmup: int = 10) -> dict:
    """Assign a vendor to ``ops`` new complaints; time each assignment."""
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
    samples, counts = time_and_count(operation, complaints, warmup, ops, redis_url)
    active = VendorAssignment.objects.filter(complaint__in=complaints, active=True).count()
    return {
        "samples_us": samples,
        "counts": counts,
        "invariants": [
            check(
                "one active assignment per complaint",
                active == len(complaints),
                f"{active} active assignments for {len(complaints)} complaints",
            )
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
    from charges.models import MonthlyCharge, MonthlyChargeRun

    org = fixtures.organization(f"bench-charges-{units}", units=units)
    actor = fixtures.staff_user("bench-charges-staff", org)
    fixtures.fresh_runs(org, 0)  # every month of this organization is new again
    months = [fixtures.month(n) for n in range(warmup + ops + 2 * COUNTED_CHARGE_RUNS)]
    operation = _charges_operation(variant, org=org, actor=actor)
    samples, counts = time_and_count(operation, months, warmup, ops, redis_url)
    runs = MonthlyChargeRun.objects.filter(organization=org).completed().count()
    charged = MonthlyCharge.objects.filter(run__organization=org).count()
    return {
        "samples_us": samples,
        "counts": counts,
        "invariants": [
            check(
                "one completed run per month, one charge per unit",
                runs == len(months) and charged == len(months) * units,
                f"{runs} runs, {charged} charges for {len(months)} months x {units} units",
            )
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
        fixtures.staff_user(actor.username, org)  # staff of every organization
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
            check(
                "every organization billed once, one charge per unit",
                runs.count() == orgs
                and len(rows) == orgs * units
                and not outsiders.exists()
                and Organization.objects.filter(slug__in=slugs).count() == orgs,
                f"{runs.count()} runs, {len(rows)} charges for {orgs} x {units} units",
            )
        ],
    }
