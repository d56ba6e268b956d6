"""Generate monthly charges from cron: one organization (``--org``) or all (``--all-orgs``).

Exit codes (the answer table, hoa/answers/table.py): 0 generated or already generated; 75
(EX_TEMPFAIL) busy or superseded by a newer holder, try again later; 1 bad input, Redis down
or billing failure. Failures are one line on stderr, never a traceback. From cron (stdout
not a terminal, no ``-v``) a success prints nothing; ``-v 1`` prints the summary, ``-v 2``
one line per organization.

``--all-orgs`` is the month start (``charges.month_start``): every organization, shared with
other cron hosts running it at the same time, ``--workers N`` processes on this host, up to
``--wait`` seconds for the organizations another host held. It exits 0 when every
organization has its completed run, 75 if some are still unfinished at the deadline. On a
terminal a progress line (done / total, rate, ETA) is rewritten as it goes.
"""

import time
from datetime import date, timedelta

from django.core.management.base import CommandError
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from charges.forms import parse_billing_month
from charges.month_start import OrgOutcome, month_of, start_month
from charges.operations import GENERATION
from charges.services import generate_monthly_charges
from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.management.base import (
    ServiceCommand,
    active_user,
    add_actor_argument,
    os_user,
    require_services,
)
from hoa.tenancy import organizations_for


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
            # Without --month: each association's current month, in its own time zone.
            month = None if month is None else parse_billing_month(month)
        except Refusal as exc:
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

    def _one(self, slug: str, month: date | None, user, via: str) -> None:
        try:
            # Which association, as whom: the resolver's answer (hoa.tenancy).
            (organization,) = organizations_for(user, slug=slug, via=via)
            result = generate_monthly_charges(
                organization=organization,
                month=month_of(organization, month),
                actor=user,
                via=via,
            )
        except Refusal as exc:
            raise answer_table.command_error(exc) from exc
        if self.verbosity >= 1:
            self.stdout.write(str(result))

    # -- every organization ------------------------------------------------------------------

    def _all(self, month: date | None, user, via: str, workers: int, wait: float) -> None:
        progress = Progress(self.stdout)
        result = start_month(
            month=month,
            actor=user,
            via=via,
            wait=timedelta(seconds=wait),
            workers=workers,
            on_outcome=lambda outcome, walk: self._show(outcome, walk.total, progress),
        )
        progress.end()
        if result.unavailable:
            raise CommandError(result.message)
        if self.verbosity >= 1:
            self.stdout.write(result.summary)
        exit_code = answer_table.ANSWERS[result.answer].exit_code
        if exit_code:
            raise CommandError(result.message, returncode=exit_code)

    def _show(self, outcome: OrgOutcome, total: int, progress: "Progress") -> None:
        if not outcome.held_elsewhere:
            progress.step(total)
        if outcome.failed:
            progress.clear()
            self.stderr.write(f"{outcome.slug}: {outcome.message}")
        elif self.verbosity >= 2:
            progress.clear()
            self.stdout.write(f"{outcome.slug}: {outcome.message}")


class Progress:
    """``done / total, rate, ETA`` on one terminal line, rewritten with ``\r``; nothing
    when stdout is not a terminal (cron)."""

    def __init__(self, stdout):
        self.stdout, self.done = stdout, 0
        self.shown = stdout.isatty()
        self.started = self.last = time.monotonic()
        self.width = 0

    def step(self, total: int) -> None:
        self.done, self.total = self.done + 1, total
        now = time.monotonic()
        if self.shown and (now - self.last >= 0.2 or self.done == self.total):
            self.last = now
            rate = self.done / max(now - self.started, 1e-9)
            eta = (self.total - self.done) / rate if rate else 0
            line = ngettext(
                "%(done)d / %(total)d association, %(rate).0f/s, ETA %(eta)ds",
                "%(done)d / %(total)d associations, %(rate).0f/s, ETA %(eta)ds",
                self.total,
            ) % {
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
