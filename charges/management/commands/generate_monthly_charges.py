"""Generate monthly charges from cron: one organization (``--org``) or all (``--all-orgs``).

Exit codes (ARCHITECTURE.md): 0 generated or already generated; 75 (EX_TEMPFAIL) busy or
superseded by a newer holder, try again later; 1 bad input, Redis down or billing failure.
Failures are one line on stderr, never a traceback.

``--all-orgs`` walks every organization and skips busy ones (reporting them), so several
cron hosts can run it at the same time and share the work; ``--workers N`` spreads the
walk over N processes on this host.
"""

import multiprocessing
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import date
from itertools import repeat
from multiprocessing.util import Finalize

from django.core.management.base import CommandError
from django.db import connections
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from charges.exceptions import ChargesError
from charges.forms import parse_billing_month
from charges.models import month_label
from charges.selectors import current_month
from charges.services import generate_monthly_charges
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
from hoa.web import answer_table
from locking import Outcome

# The words of the --all-orgs summary line, by outcome (stale: a newer holder took over).
SUMMARY = {
    Outcome.COMMITTED: gettext_lazy("generated"),
    Outcome.ALREADY_DONE: gettext_lazy("already generated"),
    Outcome.BUSY: gettext_lazy("busy"),
    Outcome.STALE: gettext_lazy("superseded"),
    Outcome.FAILED: gettext_lazy("failed"),
}


@dataclass(frozen=True)
class OrgOutcome:
    """One organization's answer, small enough to come back from a worker process."""

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
        return OrgOutcome(organization.slug, kind, str(exc))
    return OrgOutcome(organization.slug, result.outcome, result.message)


def _start_worker() -> None:
    # Forked from a parent that closed its connections: each worker opens its own and
    # closes it when the pool shuts the worker down.
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
            "--workers",
            type=int,
            default=1,
            metavar="N",
            help="with --all-orgs: process organizations in N processes (default 1)",
        )

    def handle(self, *args, org, all_orgs, month, actor, workers, **options):
        try:
            month = current_month() if month is None else parse_billing_month(month)
        except ChargesError as exc:
            raise answer_table.command_error(exc) from exc
        if workers < 1:
            raise CommandError(_("--workers must be at least 1."))
        if workers > 1 and not all_orgs:
            raise CommandError(_("--workers only applies to --all-orgs."))
        require_services()
        user = active_user(actor)
        via = f"cli:{os_user()}"
        if org:
            self._one(org, month, user, via)
        else:
            self._all(month, user, via, workers)

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
        self.stdout.write(result.message)

    # -- every organization ------------------------------------------------------------------

    def _all(self, month: date, user, via: str, workers: int) -> None:
        organizations = Organization.objects.for_user(user) if user else Organization.objects
        organizations = list(organizations.order_by("slug"))
        if workers == 1:
            counts = self._report(generate_for(org, month, user, via) for org in organizations)
        else:
            # Fork, so the workers start with Django already set up; they must not share
            # the parent's database connection.
            connections.close_all()
            with ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_worker,
            ) as pool:
                try:
                    counts = self._report(
                        pool.map(
                            generate_for, organizations, repeat(month), repeat(user), repeat(via)
                        )
                    )
                except CommandError:
                    pool.shutdown(cancel_futures=True)
                    raise
        self.stdout.write(
            _("%(month)s: %(total)d organizations: %(counts)s.")
            % {
                "month": month_label(month),
                "total": len(organizations),
                "counts": ", ".join(f"{counts[kind]} {label}" for kind, label in SUMMARY.items()),
            }
        )
        if counts[Outcome.FAILED]:
            raise CommandError(
                _("%(count)d organizations could not be billed; see the lines above.")
                % {"count": counts[Outcome.FAILED]}
            )
        if counts[Outcome.BUSY] or counts[Outcome.STALE]:
            raise CommandError(
                _("%(count)d organizations were busy or superseded; run again later to confirm.")
                % {"count": counts[Outcome.BUSY] + counts[Outcome.STALE]},
                returncode=EXIT_TEMPFAIL,
            )

    def _report(self, outcomes) -> Counter:
        """Print each outcome as it arrives; stop at once if Redis is down."""
        counts: Counter = Counter()
        for outcome in outcomes:
            if outcome.kind == Outcome.UNAVAILABLE:
                raise CommandError(outcome.message)
            counts[outcome.kind] += 1
            stream = (
                self.stdout
                if outcome.kind in (Outcome.COMMITTED, Outcome.ALREADY_DONE)
                else self.stderr
            )
            stream.write(f"{outcome.slug}: {outcome.message}")
        return counts
