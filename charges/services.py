"""Monthly charge generation: exactly one run per organization and month, one charge per unit.

``generate_monthly_charges`` is the one operation; views, the admin action and the command
parse input, check permission, call it and turn its result or exception into an answer.
The order inside (ARCHITECTURE.md, "A fenced operation, end to end"):

1. ``run_fenced`` grants a lease on ``monthly-charges:org:<id>:<YYYY-MM>`` with a fencing
   token (busy → ``GenerationBusy``; Redis down → ``LockServiceUnavailable``).
2. Outside any transaction: one billing call carrying the token and the idempotency key
   (failure → ``BillingFailed``, nothing written).
3. One ``transaction.atomic()``: the run row that carries the fence if there is none yet
   (``INSERT … ON CONFLICT DO NOTHING``), ``advance_fence`` on it (a holder whose lease
   was re-granted → ``GenerationSuperseded``), then the state check (a completed run →
   "already generated"), then the charges (COPY), the run's totals and the attempt's
   audit row (``lease.record_committed()``).

``run_fenced`` records each attempt's outcome as a ``FenceEvent``; a Redis counter that was
lost or fell behind starts a new fence epoch (docs/locking.md). Actors: a user must be
staff of the organization and hold ``charges.generate_charges`` (``NotAllowed``, recorded
as an ``AccessDenial``, otherwise); ``None`` is the deployment's operator at the shell.
"""

import logging
from dataclasses import dataclass
from datetime import date, datetime

from django.db import transaction
from django.utils import timezone

from charges import answers, billing
from charges.billing import ChargeLine
from charges.exceptions import (
    BillingFailed,
    InvalidMonth,
)
from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.resources import GENERATION, charge_resource
from hoa.integrations.webhooks import ExternalCallFailed
from hoa.models import Organization, Unit
from locking import Lease, Outcome, advance_fence, span

logger = logging.getLogger(__name__)

# -- input ----------------------------------------------------------------------------------


def _require_first_of_month(month: object) -> date:
    if isinstance(month, datetime) or not isinstance(month, date) or month.day != 1:
        raise InvalidMonth(month, "day")
    return month


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChargeRunResult:
    """What a successful call did: generated the run now, or found it already generated."""

    run: MonthlyChargeRun
    outcome: Outcome  # COMMITTED or ALREADY_DONE; run_fenced records it as the event outcome
    token: int

    @property
    def generated(self) -> bool:
        return self.outcome == Outcome.COMMITTED

    @property
    def message(self) -> str:
        return answers.result_message(self.run, generated=self.generated)


# -- the operation ---------------------------------------------------------------------------


def charge_lines(organization: Organization) -> list[ChargeLine]:
    """Return one line per unit of ``organization``: its label and monthly assessment."""
    units = Unit.objects.for_organization(organization).order_by("label")
    return list(map(ChargeLine._make, units.values_list("pk", "label", "monthly_assessment")))


def generate_monthly_charges(
    *, organization: Organization, month: date, actor, via: str = "", ip: str | None = None
) -> ChargeRunResult:
    """Generate ``organization``'s charges for ``month`` exactly once, under a fenced lease.

    ``actor`` is the user asking (staff of the organization with ``charges.generate_charges``,
    or a superuser), or ``None`` for the deployment's operator at the shell; ``via`` says
    where the request came from (e.g. ``cli:ops``) for the audit trail.
    """
    _require_first_of_month(month)
    resource = charge_resource(organization, month)
    attempt = GENERATION.begin(actor, via=via, organization=organization, resource=resource, ip=ip)

    def work(lease: Lease) -> ChargeRunResult:
        return _generate_under_lease(
            organization=organization, month=month, label=attempt.label, lease=lease
        )

    return attempt.run(work, organization=organization, month=month)


def _generate_under_lease(
    *, organization: Organization, month: date, label: str, lease: Lease
) -> ChargeRunResult:
    runs = MonthlyChargeRun.objects.for_organization(organization).filter(month=month)
    run = runs.first()
    lines: list[ChargeLine] = []
    if run is None or not run.is_completed:
        lines = charge_lines(organization)
        # Not worth a billing call if the lease is already gone (the fence would refuse
        # the write anyway): LeaseLost, answered "stopped before billing".
        lease.check()
        try:
            with span("external-call", lease=lease, attributes={"endpoint": "billing"}):
                billing.send_charge_run(
                    organization=organization, month=month, lines=lines, token=lease.token
                )
        except ExternalCallFailed as exc:
            raise BillingFailed(call=exc, organization=organization, month=month) from exc
    # else: a completed run is final, so there is nothing to bill. The transaction below
    # still runs the fence check first, so a holder that lost its lease learns it.

    with transaction.atomic():
        if run is None:
            # The row that carries the fence, created in this transaction: one round trip,
            # no transaction of its own. Two creators meet on the unique (organization,
            # month) constraint; the second one's insert does nothing.
            MonthlyChargeRun.objects.bulk_create(
                [MonthlyChargeRun(organization=organization, month=month)],
                ignore_conflicts=True,
            )
        advance_fence(runs, lease)
        # Our UPDATE holds the row lock; this read sees the latest committed state.
        run = runs.get()
        run.organization = organization
        if run.is_completed:
            outcome = Outcome.ALREADY_DONE
        else:
            now = timezone.now()
            _copy_charges(run, lines, now)
            run.status = MonthlyChargeRun.Status.COMPLETED
            run.total = billing.lines_total(lines)
            run.charge_count = len(lines)
            run.completed_at = now
            run.completed_by = label[:200]
            run.save(
                update_fields=["status", "total", "charge_count", "completed_at", "completed_by"]
            )
            outcome = Outcome.COMMITTED
            lease.record_committed(outcome)  # the audit row commits with the charges
    logger.info(
        "monthly charges %s",
        "generated" if outcome == Outcome.COMMITTED else "already generated",
        extra={
            "resource": lease.resource,
            "token": lease.token,
            "outcome": outcome,
            "charge_count": run.charge_count,
        },
    )
    return ChargeRunResult(run=run, outcome=outcome, token=lease.token)


_COPY_CHARGES = "COPY {table} (run_id, unit_id, amount, created_at) FROM STDIN"


def _copy_charges(run: MonthlyChargeRun, lines: list[ChargeLine], now: datetime) -> None:
    """Insert one charge per line with COPY, in the caller's transaction.

    COPY is about a third of the time of ``bulk_create``'s multi-row INSERTs (docs/
    benchmarks.md, 2b). psycopg's own cursor on Django's connection: the same transaction.
    The rows are written as COPY's text format in one block: integers, a decimal and a
    timestamp have nothing to escape, and formatting them here is about twice as fast as
    psycopg's per-row ``write_row``.
    """
    connection = transaction.get_connection()
    connection.ensure_connection()
    statement = _COPY_CHARGES.format(table=connection.ops.quote_name(MonthlyCharge._meta.db_table))
    tail = f"\t{now.isoformat()}\n"
    rows = "".join(f"{run.pk:d}\t{line.unit_id:d}\t{line.amount:f}{tail}" for line in lines)
    with connection.connection.cursor() as cursor, cursor.copy(statement) as copy:
        copy.write(rows)
