"""Monthly charge generation: exactly one run per organization and month, one charge per unit.

``generate_monthly_charges`` is the one operation; views, the admin action and the command
parse input, check permission, call it and turn its result or refusal into an answer. It
reads top to bottom: check the actor, then run one attempt's steps under a fenced lease
(``hoa.fenced``, the runner every operation shares), in this order:

1. ``look``: this month's run, and the units to bill unless it is completed.
2. ``call_outside``: one billing call carrying the token and the idempotency key (failure:
   ``CallFailed``, nothing written). A completed run is final: nothing to bill.
3. In one transaction: ``create``, when the look found no run (a month's first attempt,
   as at every month start): the run inserted completed, with its totals and the lease's
   token on it (``insert_fenced``), then its charges (COPY). Otherwise, or when another
   holder inserted the run meanwhile, ``fence_row`` and ``commit``: the run row if there
   is none yet (``INSERT … ON CONFLICT DO NOTHING``), ``advance_fence`` on it (a holder
   whose lease was re-granted: ``Superseded``), then the state check (a
   completed run: already generated), then the charges and the run's totals.

Actors: a user must be staff of the organization and hold ``charges.generate_charges``
(``NotPermitted``, recorded as an ``AccessDenial``, otherwise); ``None`` is the deployment's
operator at the shell.
"""

from dataclasses import dataclass
from datetime import date, datetime

import psycopg
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from charges import answers, billing
from charges.billing import ChargeLine
from charges.exceptions import InvalidMonth, UnitsChanged
from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.operations import GENERATION, charge_resource
from hoa.answers.refusals import Refusal
from hoa.batch import together
from hoa.fenced import FencedSteps, Look, Result, run_together
from hoa.integrations.webhooks import CallResult
from hoa.jobs.settling import SETTLE_VIA, Settled, settled_by
from hoa.models import Organization, OutsideCall, Unit
from locking import Lease, Outcome, insert_fenced


def generate_monthly_charges(
    *,
    organization: Organization,
    month: date,
    actor,
    via: str = "",
    ip: str | None = None,
    lines: list[ChargeLine] | None = None,
) -> Result:
    """Generate ``organization``'s charges for ``month`` exactly once, under a fenced lease.

    ``actor`` is the user asking (staff of the organization with ``charges.generate_charges``,
    or a superuser), or ``None`` for the deployment's operator at the shell; ``via`` says
    where the request came from (e.g. ``cli:ops``) for the audit trail. ``lines``: its
    units as ``units_ahead`` read them with others' (the month start's chunk), used
    instead of reading them again under the lease.
    """
    call, steps = _generation(organization, month, actor, via=via, ip=ip, lines=lines)
    return call.run(steps)


def generate_together(
    batch: list[tuple[Organization, date, list[ChargeLine] | None]], *, actor, via: str = ""
) -> list:
    """``generate_monthly_charges`` for each ``(organization, month, lines)`` of ``batch``,
    committed together (``hoa.fenced.run_together``: each under its own lease, billed on
    its own; one ``BEGIN`` and one ``COMMIT`` for all, or for as many as were billed while
    the first lease had half its time left); the month start's way.

    Return, in order, each one's ``Result`` or its refusal (a ``Refusal``, not
    raised).

    A unit removed while the batch was billed (``UnitsChanged``: one association's charges
    would name it) leaves nothing of the batch committed; each of its associations then
    runs again on its own, its units read again under its own lease.
    """

    def prepare(item):
        organization, month, lines = item
        return _generation(organization, month, actor, via=via, lines=lines)

    answers = together(batch, prepare, run=_all_or_none)
    return [
        _alone(organization, month, actor, via=via) if isinstance(answer, UnitsChanged) else answer
        for (organization, month, _), answer in zip(batch, answers, strict=True)
    ]


def _all_or_none(calls: list) -> list:
    """``run_together``, or, when a unit was removed meanwhile, ``UnitsChanged`` for each:
    nothing of the batch committed."""
    try:
        return run_together(calls)
    except UnitsChanged as changed:
        return [changed] * len(calls)


def _alone(organization, month, actor, *, via) -> "Result | Refusal":
    """One association of a batch again, on its own, its units read under its lease."""
    try:
        return generate_monthly_charges(
            organization=organization, month=month, actor=actor, via=via
        )
    except Refusal as refusal:
        return refusal


def _generation(organization, month, actor, *, via, ip=None, lines=None):
    """The permitted call and its steps, or the refusal (a bad month, not permitted)."""
    if isinstance(month, datetime) or not isinstance(month, date) or month.day != 1:
        raise InvalidMonth(month, "day")
    resource = charge_resource(organization, month)
    call = GENERATION.begin(actor, organization=organization, resource=resource, via=via, ip=ip)
    return call, ChargeRun(organization=organization, month=month, by=call.label, lines=lines)


def charge_lines(organization: Organization) -> list[ChargeLine]:
    """Return one line per unit of ``organization``: its label and monthly assessment."""
    units = Unit.objects.for_organization(organization).order_by("label")
    return list(map(ChargeLine._make, units.values_list("pk", "label", "monthly_assessment")))


@dataclass(frozen=True)
class RunLook(Look):
    run: MonthlyChargeRun | None  # the month's run, if one exists yet (``fenced``)
    lines: list[ChargeLine]  # what to bill; empty for a completed run


def units_ahead(organizations: list[Organization]) -> dict[int, list[ChargeLine]]:
    """``charge_lines`` of many organizations in one query, keyed by organization id; the
    month start reads each chunk's so, before the leases.

    Only the units: the run's state is read under each lease (``ChargeRun.look``), so that
    a run another host completed meanwhile is not billed again. Units were never read in
    the commit's transaction, so reading them a little earlier changes nothing.
    """
    lines: dict[int, list[ChargeLine]] = {organization.pk: [] for organization in organizations}
    units = Unit.objects.filter(organization_id__in=list(lines)).order_by(
        "organization_id", "label"
    )
    fields = ("organization_id", "pk", "label", "monthly_assessment")
    for org_id, *line in units.values_list(*fields):
        lines[org_id].append(ChargeLine._make(line))
    return lines


@dataclass(frozen=True)
class ChargeRun(FencedSteps):
    """One attempt at a month's charges, as the runner's steps (``hoa.fenced``)."""

    organization: Organization
    month: date
    by: str  # who asked, as the run records it
    lines: list[ChargeLine] | None = None  # the units as ``units_ahead`` read them, if it did

    endpoint = "billing"

    @property
    def subject(self) -> dict:
        return {"organization": self.organization, "month": self.month}

    def runs(self) -> QuerySet:
        return MonthlyChargeRun.objects.for_organization(self.organization).filter(month=self.month)

    def look(self, lease: Lease) -> RunLook:
        run = self.runs().first()
        if run is not None and run.is_completed:
            # Final: nothing to bill. The commit still checks the fence first, so a holder
            # that lost its lease learns it.
            return RunLook(run=run, lines=[], needs_call=False, fenced=run)
        lines = self.lines if self.lines is not None else charge_lines(self.organization)
        return RunLook(run=run, lines=lines, needs_call=True, fenced=run)

    def call_outside(self, lease: Lease, found: RunLook) -> CallResult:
        return billing.send_charge_run(
            organization=self.organization, month=self.month, lines=found.lines, token=lease
        )

    def create(self, lease: Lease, found: RunLook, receipt) -> Result | None:
        if found.run is not None:
            return None
        now = timezone.now()
        run = MonthlyChargeRun(
            organization=self.organization,
            month=self.month,
            **_completed(found.lines, by=self.by, now=now),
        )
        # Nothing inserted: another holder's run is there now (or the resource has a newer
        # epoch); the runner fences that row and ``commit`` reads its state.
        if not insert_fenced(run, lease):
            return None
        self._copy(run, found.lines, now)
        return Result(Outcome.COMMITTED, lease.token, run, answers.result_message)

    def fence_row(self, found: RunLook) -> QuerySet:
        # The month's run: read by the look, or inserted since by another holder (``create``
        # inserted nothing because of it). Runs are never deleted.
        return self.runs()

    def commit(self, lease: Lease, found: RunLook, receipt) -> Result:
        # The fence UPDATE holds the row lock: this read sees the latest committed state.
        run = self.runs().get()
        run.organization = self.organization
        if run.is_completed:
            return Result(Outcome.ALREADY_DONE, lease.token, run, answers.result_message)
        now = timezone.now()
        self._copy(run, found.lines, now)
        completed = _completed(found.lines, by=self.by, now=now)
        for name, value in completed.items():
            setattr(run, name, value)
        run.save(update_fields=list(completed))
        return Result(Outcome.COMMITTED, lease.token, run, answers.result_message)

    def _copy(self, run: MonthlyChargeRun, lines: list[ChargeLine], now: datetime) -> None:
        """The charges of ``lines``; a unit removed since the look refuses the attempt.

        The units were read before the billing call, outside the transaction; a unit
        deleted since (one never billed: the charges of earlier months protect the others)
        fails the charges' foreign key, which is the check. The rest of the transaction
        then rolls back with the refusal. Nothing is locked for it in the usual case: the
        foreign key's own check is what finds it.
        """
        try:
            _copy_charges(run, lines, now)
        except psycopg.errors.ForeignKeyViolation as exc:
            if "unit_id" not in (exc.diag.constraint_name or ""):
                raise
            raise UnitsChanged(organization=self.organization, month=self.month) from exc


def _completed(lines: list[ChargeLine], *, by: str, now: datetime) -> dict:
    """The fields of a run that billed ``lines``, completed at ``now`` by ``by``."""
    return {
        "status": MonthlyChargeRun.Status.COMPLETED,
        "total": billing.lines_total(lines),
        "charge_count": len(lines),
        "completed_at": now,
        "completed_by": by[:200],
    }


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
    head, tail = f"{run.pk:d}\t", f"\t{now.isoformat()}\n"  # the run's id read once, not per row
    rows = "".join(f"{head}{line.unit_id:d}\t{line.amount:f}{tail}" for line in lines)
    with connection.connection.cursor() as cursor, cursor.copy(statement) as copy:
        copy.write(rows)


def settle_unknown(call: OutsideCall) -> Settled:
    """Settle a billing call whose outcome was unknown: generate the run again, by the same
    key (the billing system collapses it to the run it got, or bills it now)."""
    match = GENERATION.resource.fullmatch(call.resource)
    month = date.fromisoformat(f"{match['month']}-01")
    return settled_by(
        lambda: generate_monthly_charges(
            organization=call.organization, month=month, actor=None, via=SETTLE_VIA
        )
    )
