"""Section 2: what the fence costs on top of the write it protects: each process times its
operations, then counts round trips and Redis commands over a few more (docs/benchmarks.md)."""

import contextlib
import functools
import multiprocessing
import os
import subprocess
import sys
import time
from decimal import Decimal

from django.conf import settings
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench import diagnose, fixtures
from bench.environment import BASE_DIR, start_stand_in
from bench.measure import PeakMemory, check, result, since_us, time_and_count
from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.month_start import CHUNK as MONTH_START_CHUNK
from charges.month_start import generate_chunk
from charges.services import generate_monthly_charges
from hoa.models import Complaint, Organization, Unit, default_time_zone
from locking import unfenced_writes
from vendors.models import Invoice, VendorAssignment, VendorContract, VendorPayment
from vendors.payments import pay_invoice
from vendors.services import assign_vendor

# Operations counted (untimed) after the timed ones; counts do not vary between runs.
COUNTED_OPS, COUNTED_CHARGE_RUNS = 3, 1


# -- vendor assignment ----------------------------------------------------------------------
def _insert_assignment(complaint, *, vendor, actor) -> None:
    VendorAssignment.objects.create(
        complaint=complaint, vendor=vendor, fence_token=1, assigned_by=actor,
        actor_label=actor.username,
    )  # fmt: skip


def _checked(item, *, vendor, actor) -> None:
    """The service's steps, no lease, fence, audit (``item``: a complaint, or what it replaces)."""
    reassign = isinstance(item, VendorAssignment)
    complaint = item.complaint if reassign else item
    organization, today = complaint.organization, timezone.localdate()
    if not (organization.has_staff(actor) and actor.has_perm("vendors.assign_vendor")):
        raise PermissionError(actor.username)
    if not VendorContract.objects.filter(
        vendor=vendor, organization=organization, starts_on__lte=today, ends_on__gte=today
    ).exists():
        raise ValueError("no active contract")
    with transaction.atomic():
        Complaint.objects.select_for_update().filter(pk=complaint.pk).first()
        if reassign:
            replaced = VendorAssignment.objects.filter(pk=item.pk, active=True).update(
                active=False, deactivated_at=timezone.now()
            )
            if replaced != 1:
                raise ValueError("changed since viewed")
        elif complaint.assignments.filter(active=True).exists():
            raise ValueError("already assigned")
        _insert_assignment(complaint, vendor=vendor, actor=actor)


VENDOR_VARIANTS = {
    "plain": transaction.atomic(_insert_assignment),
    "checked": _checked, "checked_reassign": _checked,
    "service": lambda complaint, **given: assign_vendor(complaint=complaint, **given),
    "service_reassign": lambda seen, **given: assign_vendor(
        complaint=seen.complaint, reassign=True, replacing=seen, **given
    ),
}  # fmt: skip


def vendor(*, variant: str, redis_url: str, ops: int, warmup: int = 10) -> dict:
    """Time ``ops`` assignments on new complaints, or (``…_reassign``) on ones assigned before."""
    org = fixtures.organization("bench-vendor")
    actor = fixtures.staff_user("bench-vendor-staff", org)
    first, other = fixtures.vendors_with_contracts(org, 2)
    label = fixtures.unique_label(f"vendor-{variant}")
    rows = fixtures.complaints(org, warmup + ops + 2 * COUNTED_OPS, title=label)
    # As a view would have it: the complaint and its organization in hand.
    picked = Complaint.objects.filter(pk__in=[r.pk for r in rows]).select_related("organization")
    complaints = list(picked.order_by("pk"))
    chosen, items = first, complaints
    if variant.endswith("_reassign"):
        items = [assign_vendor(complaint=c, vendor=first, actor=actor).assignment for c in items]
        for seen, complaint in zip(items, complaints, strict=True):
            seen.complaint = complaint  # the page's form carries what it showed
        chosen = other
    operation = functools.partial(VENDOR_VARIANTS[variant], vendor=chosen, actor=actor)
    samples, counts = time_and_count(operation, items, warmup, ops, redis_url)
    active = VendorAssignment.objects.filter(complaint__in=complaints, active=True)
    of_chosen = active.filter(vendor=chosen).count()
    detail = f"{active.count()} active assignments, {of_chosen} of the vendor asked for, for "
    detail += f"{len(complaints)} complaints"
    ok = active.count() == of_chosen == len(complaints)
    invariant = check("one active assignment per complaint, the one asked for", ok, detail)
    return result(samples, invariant, counts=counts)


# -- paying an approved invoice ---------------------------------------------------------------
def payment(*, variant: str, redis_url: str, ops: int, warmup: int = 10) -> dict:
    from bench.http_baseline import pay_unfenced

    org = fixtures.organization("bench-payment")
    actor = fixtures.staff_user("bench-payment-staff", org)
    [payee] = fixtures.vendors_with_contracts(org, 1)
    label = fixtures.unique_label(f"payment-{variant}")
    count = warmup + ops + 2 * COUNTED_OPS
    made = fixtures.approved_invoices(org, count, vendor=payee, label=label)
    # As the page's view has it: the invoice, its association and vendor in hand.
    invoices = Invoice.objects.filter(pk__in=[i.pk for i in made]).order_by("pk")
    items = list(invoices.select_related("organization", "vendor"))
    settings.VENDOR_PAYMENT_URL = start_stand_in("/payment")[1]  # this process's own
    pay = pay_unfenced if variant == "checked" else pay_invoice

    def operation(invoice) -> None:
        pay(invoice=invoice, actor=actor, seen=invoice.version)

    samples, counts = time_and_count(operation, items, warmup, ops, redis_url)
    paid = invoices.filter(status=Invoice.Status.PAID).count()
    recorded = VendorPayment.objects.filter(invoice__in=invoices).count()
    detail = f"{paid} invoices paid, {recorded} payments recorded, of {count}"
    ok = paid == recorded == count
    return result(samples, check("every invoice paid once", ok, detail), counts=counts)


# -- monthly charges ------------------------------------------------------------------------
def _plain_run(org, month, insert) -> None:
    """Read the units, then in one transaction: the run row, ``insert``, the run completed."""
    units = Unit.objects.for_organization(org).order_by("label")
    rows = list(units.values_list("pk", "monthly_assessment"))
    with transaction.atomic():
        run = MonthlyChargeRun.objects.create(organization=org, month=month)
        insert(run, rows, timezone.now())
        done = {"status": run.Status.COMPLETED, "charge_count": len(rows), "completed_by": "bench",
                "total": sum((amount for _, amount in rows), Decimal("0.00")),
                "completed_at": timezone.now()}  # fmt: skip
        for field, value in done.items():
            setattr(run, field, value)
        with unfenced_writes():  # the unfenced twin, on a strict table (two round trips)
            run.save(update_fields=list(done))


def _plain_chunk(org_ids, month) -> None:
    MonthlyChargeRun.objects.replan_charge_checks()
    for org_id in org_ids:
        _plain_run(Organization(pk=org_id), month, _copy)


def _bulk_create(run, rows, now) -> None:
    MonthlyCharge.objects.bulk_create(
        [MonthlyCharge(run=run, unit_id=pk, amount=amount, created_at=now) for pk, amount in rows]
    )


def _copy(run, rows, now) -> None:
    # The Django connection's own psycopg connection: the same transaction.
    columns = "(run_id, unit_id, amount, created_at)"
    with (
        connection.connection.cursor() as cursor,
        cursor.copy(f"COPY {MonthlyCharge._meta.db_table} {columns} FROM STDIN") as copier,
    ):
        for pk, amount in rows:
            copier.write_row((run.pk, pk, amount, now))


def _charges_operation(variant: str, *, org, actor):
    if insert := {"bulk_create": _bulk_create, "copy": _copy}.get(variant):
        return functools.partial(_plain_run, org, insert=insert)
    # This worker process runs this one variant: the setting is its own.
    billed = variant == "service_billed"
    settings.BILLING_WEBHOOK_URL = start_stand_in("/billing")[1] if billed else ""
    return lambda month: generate_monthly_charges(organization=org, month=month, actor=actor)


def charges(*, variant: str, redis_url: str, units: int, ops: int, warmup: int = 1) -> dict:
    org = fixtures.organization(f"bench-charges-{units}", units=units)
    actor = fixtures.staff_user("bench-charges-staff", org)
    fixtures.fresh_runs(org, 0)  # every month of this organization is new again
    months = [fixtures.month(n) for n in range(warmup + ops + 2 * COUNTED_CHARGE_RUNS)]
    operation = _charges_operation(variant, org=org, actor=actor)
    samples, counts = time_and_count(operation, months, warmup, ops, redis_url)
    runs = MonthlyChargeRun.objects.filter(organization=org).completed().count()
    charged = MonthlyCharge.objects.filter(run__organization=org).count()
    ok = runs == len(months) and charged == len(months) * units
    detail = f"{runs} runs, {charged} charges for {len(months)} months x {units} units"
    invariant = check("one completed run per month, one charge per unit", ok, detail)
    return result(samples, invariant, counts=counts)


# -- the month start at scale: every association, 200 units each, one new month -------------
MONTH_START_SLUG = "bench-month-"  # the fixture's associations, created and deleted per process
MONTH_START_ACTOR = "bench-month-staff"  # staff of those only: --all-orgs walks nothing else
UNITS_PER_ASSOCIATION = 200
ORGANIZATION_COLUMNS = (
    "name, slug, sla_hours_high, sla_hours_normal, sla_hours_low, created_at, time_zone"
)
# Dependents first. %(slug)s: the fixture's associations; %(resource)s: their leases' audit.
_OF_FIXTURE = "USING hoa_organization org WHERE organization_id = org.id AND org.slug LIKE %(slug)s"
MONTH_START_CLEANUP = (
    "DELETE FROM charges_monthlycharge USING charges_monthlychargerun run, hoa_organization org"
    " WHERE run_id = run.id AND run.organization_id = org.id AND org.slug LIKE %(slug)s",
    *(f"DELETE FROM {table} {_OF_FIXTURE}"  # noqa: S608 - constants
      for table in ("charges_monthlychargerun", "hoa_unit", "hoa_staffmembership")),
    "DELETE FROM hoa_organization WHERE slug LIKE %(slug)s",
    "DELETE FROM locking_fenceevent WHERE resource LIKE %(resource)s",
    "DELETE FROM locking_fenceepoch WHERE resource LIKE %(resource)s",
)  # fmt: skip
# The cleanup in make bench-scale's own database, which holds nothing else.
SCALE_DATABASE_PREFIX = "bench_scale"
MONTH_START_TRUNCATE = """
TRUNCATE charges_monthlycharge, charges_monthlychargerun, hoa_unit, hoa_staffmembership,
         hoa_organization, locking_fenceevent, locking_fenceepoch CASCADE
"""
# Associations without exactly one completed run of one charge per unit; all; charges.
MONTH_START_CHECK_SQL = """
SELECT count(*) FILTER (WHERE ok IS NOT TRUE), count(*), coalesce(sum(charged), 0)::bigint
FROM (
    SELECT count(charge.id) AS charged,
           count(DISTINCT run.id) = 1 AND bool_and(run.status = 'completed')
           AND count(charge.id) = (SELECT count(*) FROM hoa_unit WHERE organization_id = org.id)
           AS ok
    FROM hoa_organization org
    LEFT JOIN charges_monthlychargerun run ON run.organization_id = org.id AND run.month = %s
    LEFT JOIN charges_monthlycharge charge ON charge.run_id = run.id
    WHERE org.slug LIKE %s
    GROUP BY org.id
) AS per_association
"""


@contextlib.contextmanager
def _without_timeouts():
    """The connection without hoa/settings.py's timeouts, for the fixture (the timed part: with)."""
    options = connection.settings_dict["OPTIONS"]
    kept = dict(options)
    connection.close()
    options["read_timeout"] = 0  # hoa/ops/postgresql/base.py: 0 is no read timeout
    options["options"] = f"{options.get('options', '')} -c statement_timeout=0".strip()
    try:
        yield
    finally:
        connection.close()
        options.clear()
        options.update(kept)


def _copy_in(cursor, target: str, lines) -> None:
    with cursor.copy(f"COPY {target} FROM STDIN") as copy:
        for line in lines:
            copy.write(line)


def _copy_associations(count: int) -> list[int]:
    """COPY ``count`` associations, their units and the actor's memberships; return their ids."""
    now = timezone.now().isoformat()
    slugs = [f"{MONTH_START_SLUG}{n:05d}" for n in range(count)]
    units = [f"\tU{n:05d}\t{150 + n % 100}\n" for n in range(1, UNITS_PER_ASSOCIATION + 1)]
    with connection.cursor() as django_cursor:
        cursor = django_cursor.cursor  # psycopg's own, for COPY
        zone = default_time_zone()  # COPY fills no model defaults: the column has none in SQL
        rows = (f"{slug}\t{slug}\t24\t72\t168\t{now}\t{zone}\n" for slug in slugs)
        _copy_in(cursor, f"hoa_organization ({ORGANIZATION_COLUMNS})", rows)
        cursor.execute("SELECT id FROM hoa_organization WHERE slug = ANY(%s) ORDER BY id", [slugs])
        ids = [org_id for (org_id,) in cursor.fetchall()]
        rows = ("".join(f"{org_id}{unit}" for unit in units) for org_id in ids)  # 200 at a time
        _copy_in(cursor, "hoa_unit (organization_id, label, monthly_assessment)", rows)
        actor = fixtures.staff_user(MONTH_START_ACTOR, Organization.objects.get(pk=ids[0]))
        rows = (f"{actor.pk}\t{org_id}\t{now}\n" for org_id in ids[1:])
        _copy_in(cursor, "hoa_staffmembership (user_id, organization_id, created_at)", rows)
        # Statistics, as a deployment's long-lived units have (docs/benchmarks.md: without
        # them each chunk's units query scanned every unit until autovacuum came).
        cursor.execute("ANALYZE hoa_organization, hoa_unit, hoa_staffmembership")
    return ids


def _delete_associations(month, cleanup: str = "delete") -> None:
    """Delete what the fixture and ``month``'s runs wrote, or (``truncate``) empty the tables."""
    if cleanup == "truncate":
        name = connection.settings_dict["NAME"]
        if not name.startswith(SCALE_DATABASE_PREFIX):
            raise SystemExit(f"refusing to empty the tables of {name!r}")
        with connection.cursor() as cursor:
            cursor.execute(MONTH_START_TRUNCATE)
        return
    patterns = {"slug": f"{MONTH_START_SLUG}%", "resource": f"monthly-charges:org:%:{month:%Y-%m}"}
    # The runs' table is strict: its clean-up says it writes unfenced (one transaction).
    with transaction.atomic(), unfenced_writes(), connection.cursor() as cursor:
        for statement in MONTH_START_CLEANUP:
            cursor.execute(statement, patterns)


def _run_commands(hosts: int, month, workers: int = 2) -> list[int]:
    """``hosts`` cron runs of the command at once, billing to a stand-in; their exit codes."""
    billing, billing_url = start_stand_in("/billing")
    command = [sys.executable, "manage.py", "generate_monthly_charges", "--all-orgs", "--workers",
               str(workers), "--month", f"{month:%Y-%m}", "--actor", MONTH_START_ACTOR]  # fmt: skip
    env = {**os.environ, "BILLING_WEBHOOK_URL": billing_url}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    runs = [subprocess.Popen(command, cwd=BASE_DIR, env=env, **quiet) for _ in range(hosts)]
    codes = [run.wait() for run in runs]
    billing.shutdown()
    return codes


def _diagnosis(variant: str, ids: list[int], month) -> dict:
    """The timed part's statements (``pg_stat_statements``) and one more chunk's plans."""
    statements = diagnose.snapshot()
    chunk, started_at = ids[:MONTH_START_CHUNK], timezone.now()
    following = fixtures.month((month.year - 2001) * 12 + month.month)
    billing, settings.BILLING_WEBHOOK_URL = start_stand_in("/billing")
    try:
        with CaptureQueriesContext(connection) as captured:
            if variant == "baseline":
                _plain_chunk(chunk, following)
            else:
                actor = fixtures.staff_user(MONTH_START_ACTOR, Organization(pk=ids[0]))
                generate_chunk(chunk, following, actor.pk, "bench", started_at)
    finally:
        billing.shutdown()
    plans = diagnose.explain([query["sql"] for query in captured.captured_queries])
    return {"statements": statements, "plans": plans}


def _plain_walk(ids: list[int], month) -> None:
    """2b's COPY variant per association, 2 processes, in the command's chunks, each replanned."""
    size = MONTH_START_CHUNK
    chunks = [ids[n : n + size] for n in range(0, len(ids), size)]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(functools.partial(_plain_chunk, month=month), chunks, chunksize=1)


def month_start(
    *, variant: str, associations: int, workers: int = 2, diagnosis: bool = False,
    cleanup: str = "delete",
) -> dict:  # fmt: skip
    """Bill one new month for ``associations`` x 200 units as ``variant``; time, check, clean up."""
    month = fixtures.month(3600)  # 2301-01: no other case bills it
    with _without_timeouts():
        _delete_associations(month, cleanup)  # what a crashed earlier process may have left
        ids = _copy_associations(associations)
        diagnosis = diagnosis and diagnose.available()
        if diagnosis:
            diagnose.reset()  # the timed part's statements only
    connections.close_all()  # the children open their own
    codes = []
    peak = PeakMemory(os.getpid())  # every process of the walk (the pool, or the commands)
    try:
        with peak:
            started = time.perf_counter_ns()
            if variant == "baseline":
                _plain_walk(ids, month)
            else:
                codes = _run_commands(2 if variant == "two_hosts" else 1, month, workers)
            elapsed = since_us(started)  # before the poller stops
        with _without_timeouts():
            found = _diagnosis(variant, ids, month) if diagnosis else {}
            with connection.cursor() as cursor:
                cursor.execute(MONTH_START_CHECK_SQL, [month, f"{MONTH_START_SLUG}%"])
                wrong, checked, charged = cursor.fetchone()
    finally:
        with _without_timeouts():
            _delete_associations(month, cleanup)
    seconds = elapsed / 1e6
    metrics = {
        "seconds": round(seconds, 2), "associations_per_s": round(checked / seconds, 1),
        "charges_per_s": round(charged / seconds, 1), "charges": charged,
        "peak_rss_mb": peak.mb,  # the largest of the walk's processes (PeakMemory)
        "exit_codes": ", ".join(map(str, codes)) or "-", **found,
    }  # fmt: skip
    ok = wrong == 0 and checked == associations
    detail = f"{checked} associations, {wrong} not billed exactly once"
    invariant = check("every association: one completed run, one charge per unit", ok, detail)
    return result([elapsed], invariant, metrics=metrics)
