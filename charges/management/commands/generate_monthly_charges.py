"""Generate monthly charges from cron: one organization (``--org``) or all (``--all-orgs``).

Exit codes (ARCHITECTURE.md): 0 generated or already generated; 75 (EX_TEMPFAIL) busy or
superseded by a newer holder, try again later; 1 bad input, Redis down or billing failure.
Failures are one line on stderr, never a traceback. From cron (stdout not a terminal, no
``-v``) a success prints nothing; ``-v 1`` prints the summary, ``-v 2`` one line per
organization.

``--all-orgs`` walks every organization and skips busy ones, so several cron hosts can run
it at the same time and share the work; ``--workers N`` spreads the walk over N processes
on this host (each gets chunks of ids and keeps its connections). After its pass a host
waits, up to ``--wait`` seconds, for the organizations another host held: it confirms the
completed ones from the database and retries those whose holder went away. It exits 0 when
every organization has its completed run, 75 if some are still unfinished at the deadline.
On a terminal a progress line (done / total, rate, ETA) is rewritten as it goes.
"""

import contextlib
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import date
from itertools import repeat
from multiprocessing.util import Finalize

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import connections
from django.utils.translation import gettext as _

from charges.exceptions import ChargesError
from charges.forms import parse_billing_month
from charges.models import MonthlyChargeRun, month_label
from charges.operations import GENERATION, charge_resource
from charges.selectors import current_month
from charges.services import generate_monthly_charges
from hoa.answers import table as answer_table
from hoa.management.base import (
    EXIT_TEMPFAIL,
    ServiceCommand,
    active_user,
    add_actor_argument,
    os_user,
    require_services,
)
from hoa.models import Organization
from hoa.security.audit import shown
from locking import LockUnavailable, Outcome, prepare_fences


@dataclass(frozen=True)
class OrgOutcome:
    """One organization's answer, small enough to come back from a worker process."""

    org_id: int
    slug: str
    kind: Outcome
    message: str


def generate_for(organization: Organization, month: date, user, via: str) -> OrgOutcome:
    """Run the service for one organization and classify its answer."""
    try:
        result = generate_monthly_charges(
            organization=organization, month=month, actor=user, via=via
        )
    except ChargesError as exc:  # each one raised here declares its outcome
        # Not allowed (the --actor is not permitted staff of it) counts as failed.
        kind = Outcome.FAILED if exc.outcome is Outcome.DENIED else exc.outcome
        return OrgOutcome(organization.pk, organization.slug, kind, str(exc))
    return OrgOutcome(organization.pk, organization.slug, result.outcome, result.message)


# Organizations per task sent to a worker: ids go out, one query reads them there.
CHUNK = 50
# A worker process's actor, read once (its permission cache then lasts the whole run).
_actors: dict = {}


def generate_chunk(org_ids: list[int], month: date, user_id: int | None, via: str) -> list:
    """Generate the charges of the organizations ``org_ids``: a worker's task."""
    user = None
    if user_id is not None:
        user = _actors.get(user_id) or _actors.setdefault(
            user_id, get_user_model()._default_manager.get(pk=user_id)
        )
    organizations = list(Organization.objects.filter(pk__in=org_ids).order_by("pk"))
    # A new month is a new resource per organization: their first epochs in one commit.
    # Redis down is left to the grants to answer, one by one, in the batch's own words.
    with contextlib.suppress(LockUnavailable):
        prepare_fences(charge_resource(organization, month) for organization in organizations)
    outcomes = []
    for organization in organizations:
        if user is not None:
            organization.remember_staff(user)  # the ids came from for_user(user)
        outcomes.append(generate_for(organization, month, user, via))
    return outcomes


def _start_worker() -> None:
    # Forked from a parent that closed its connections: each worker opens its own, keeps
    # it for all its tasks and closes it when the pool shuts the worker down.
    Finalize(None, connections.close_all, exitpriority=10)


class Command(ServiceCommand):
    help = (
        "Generate the monthly charges of one organization (--org SLUG) or of every "
        "organization (--all-orgs), exactly once. Exit 0 done or already done, 75 busy or "
        "superseded (try again later), 1 bad input, Redis down or billing failure."
    )

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--org", metavar="SLUG", help="the organization's slug")
        target.add_argument(
            "--all-orgs",
            action="store_true",
            help="every organization (those of --actor if given); busy ones are skipped",
        )
        parser.add_argument(
            "--month", metavar="YYYY-MM", help="the month to bill (default: the current month)"
        )
        add_actor_argument(parser)
        parser.add_argument(
            "--wait",
            type=float,
            metavar="SECONDS",
            help="with --all-orgs: how long to wait for organizations another host holds "
            "(default: three times the lease TTL, CHARGES_LOCK_TTL_SECONDS)",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            metavar="N",
            help="with --all-orgs: process organizations in N processes (default 1)",
        )

    def handle(self, *args, org, all_orgs, month, actor, workers, wait, **options):
        try:
            month = current_month() if month is None else parse_billing_month(month)
        except ChargesError as exc:
            raise answer_table.command_error(exc) from exc
        if workers < 1:
            raise CommandError(_("--workers must be at least 1."))
        if workers > 1 and not all_orgs:
            raise CommandError(_("--workers only applies to --all-orgs."))
        if wait is None:
            wait = 3 * GENERATION.lease_ttl.total_seconds()
        elif wait < 0:
            raise CommandError(_("--wait must not be negative."))
        self.verbosity = options["verbosity"]
        require_services()
        user = active_user(actor)
        via = f"cli:{os_user()}"
        if org:
            self._one(org, month, user, via)
        else:
            self._all(month, user, via, workers, wait)

    # -- one organization --------------------------------------------------------------------

    def _one(self, slug: str, month: date, user, via: str) -> None:
        organization = Organization.objects.filter(slug=slug).first()
        if organization is None:
            raise CommandError(_('Unknown organization "%(slug)s".') % {"slug": shown(slug)})
        try:
            result = generate_monthly_charges(
                organization=organization, month=month, actor=user, via=via
            )
        except ChargesError as exc:
            raise answer_table.command_error(exc) from exc
        if self.verbosity >= 1:
            self.stdout.write(result.message)

    # -- every organization ------------------------------------------------------------------

    def _all(self, month: date, user, via: str, workers: int, wait: float) -> None:
        organizations = Organization.objects.for_user(user) if user else Organization.objects
        # Ids only: a worker reads its chunk's rows itself (memory flat in the count).
        ids = list(organizations.order_by("pk").values_list("pk", flat=True).distinct())
        chunks = [ids[n : n + CHUNK] for n in range(0, len(ids), CHUNK)]
        user_id = user.pk if user else None
        progress = Progress(self.stdout, total=len(ids))
        if workers == 1:
            if user is not None:
                _actors[user.pk] = user
            results = map(generate_chunk, chunks, repeat(month), repeat(user_id), repeat(via))
            tally = self._report(results, progress)
        else:
            # Fork, so the workers start with Django already set up; they must not share
            # the parent's database connection.
            connections.close_all()
            with ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_worker,
            ) as pool:
                results = pool.map(
                    generate_chunk, chunks, repeat(month), repeat(user_id), repeat(via)
                )
                try:
                    tally = self._report(results, progress)
                except CommandError:
                    pool.shutdown(cancel_futures=True)
                    raise
        if tally.held:
            self._wait_for_others(tally, month, user, via, wait, progress)
        progress.end()
        if self.verbosity >= 1:
            self.stdout.write(tally.summary(len(ids), month))
        if tally.failed:
            raise CommandError(
                _("%(count)d organizations could not be billed; see the lines above.")
                % {"count": tally.failed}
            )
        if tally.held:
            raise CommandError(
                _(
                    "%(count)d organizations were still busy after waiting %(wait)g s; "
                    "run again later to confirm."
                )
                % {"count": len(tally.held), "wait": wait},
                returncode=EXIT_TEMPFAIL,
            )

    def _wait_for_others(self, tally, month, user, via, wait: float, progress) -> None:
        """Wait (until ``wait`` seconds from now) for the organizations another worker
        held: confirm the ones it completed from the database, retry the ones it left."""
        deadline = time.monotonic() + wait
        while tally.held:
            done = set(
                MonthlyChargeRun.objects.filter(organization__in=list(tally.held), month=month)
                .completed()
                .values_list("organization_id", flat=True)
            )
            for org_id in done:
                tally.confirm(org_id)
                progress.step()
            left = Organization.objects.filter(pk__in=list(tally.held)).order_by("pk")
            for organization in left:  # their holder may have gone: try once more each
                if user is not None:
                    organization.remember_staff(user)
                self._count(generate_for(organization, month, user, via), tally, progress)
            if not tally.held or time.monotonic() >= deadline:
                return
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))

    def _report(self, chunks, progress) -> "Tally":
        """Count each outcome as it arrives; stop at once if Redis is down."""
        tally = Tally()
        for outcomes in chunks:
            for outcome in outcomes:
                self._count(outcome, tally, progress)
        return tally

    def _count(self, outcome: OrgOutcome, tally: "Tally", progress) -> None:
        if outcome.kind == Outcome.UNAVAILABLE:
            raise CommandError(outcome.message)
        tally.add(outcome)
        if outcome.kind not in (Outcome.BUSY, Outcome.STALE):
            progress.step()
        if outcome.kind == Outcome.FAILED:
            progress.clear()
            self.stderr.write(f"{outcome.slug}: {outcome.message}")
        elif self.verbosity >= 2:
            progress.clear()
            self.stdout.write(f"{outcome.slug}: {outcome.message}")


class Tally:
    """What the walk did so far: generated here, done by another worker, failed, held."""

    def __init__(self):
        self.here = self.elsewhere = self.failed = 0
        self.held: set[int] = set()  # busy or superseded: another worker has it now

    def add(self, outcome: OrgOutcome) -> None:
        self.held.discard(outcome.org_id)
        if outcome.kind == Outcome.COMMITTED:
            self.here += 1
        elif outcome.kind == Outcome.ALREADY_DONE:
            self.elsewhere += 1
        elif outcome.kind == Outcome.FAILED:
            self.failed += 1
        else:
            self.held.add(outcome.org_id)

    def confirm(self, org_id: int) -> None:
        """Another worker completed it: the database says so."""
        self.held.discard(org_id)
        self.elsewhere += 1

    def summary(self, total: int, month: date) -> str:
        line = _(
            "%(month)s: %(total)d associations: %(here)d generated here, %(elsewhere)d by "
            "another worker, %(failed)d failed"
        ) % {
            "month": month_label(month),
            "total": total,
            "here": self.here,
            "elsewhere": self.elsewhere,
            "failed": self.failed,
        }
        if self.held:
            line += _(", %(count)d unfinished") % {"count": len(self.held)}
        return line + "."


class Progress:
    """``done / total, rate, ETA`` on one terminal line, rewritten with ``\r``; nothing
    when stdout is not a terminal (cron)."""

    def __init__(self, stdout, *, total: int):
        self.stdout, self.total, self.done = stdout, total, 0
        self.shown = stdout.isatty()
        self.started = self.last = time.monotonic()
        self.width = 0

    def step(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.shown and (now - self.last >= 0.2 or self.done == self.total):
            self.last = now
            rate = self.done / max(now - self.started, 1e-9)
            eta = (self.total - self.done) / rate if rate else 0
            line = _("%(done)d / %(total)d associations, %(rate).0f/s, ETA %(eta)ds") % {
                "done": self.done,
                "total": self.total,
                "rate": rate,
                "eta": round(eta),
            }
            self.width = max(self.width, len(line))
            self.stdout.write(f"\r{line:<{self.width}}", ending="")
            self.stdout.flush()

    def clear(self) -> None:
        if self.shown and self.width:
            self.stdout.write(f"\r{'':<{self.width}}\r", ending="")

    def end(self) -> None:
        if self.shown and self.width:
            self.stdout.write("")
