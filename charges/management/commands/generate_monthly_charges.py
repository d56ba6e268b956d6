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

from django.core.management.base import CommandError
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from charges.forms import parse_billing_month
from charges.month_start import month_of, start_month
from charges.operations import GENERATION
from charges.services import generate_monthly_charges
from hoa.management.base import BatchCommand
from hoa.tenancy import organizations_for


class Command(BatchCommand):
    help = (
        "Generate the monthly charges of one organization (--org SLUG) or of every "
        "organization (--all-orgs), exactly once. Exit 0 done or already done, 75 busy or "
        "superseded (try again later), 1 bad input, Redis down or billing failure."
    )
    operation = GENERATION
    items = "organizations"
    held_lines = True  # -v 2: a busy association's line too, before it is tried again

    def add_own_arguments(self, parser, target):
        parser.add_argument(
            "--month", metavar="YYYY-MM", help="the month to bill (default: the current month)"
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            metavar="N",
            help="with --all-orgs: process organizations in N processes (default 1)",
        )

    def parse(self, *, month, workers, all_orgs, **options):
        # Without --month: each association's current month, in its own time zone.
        month = None if month is None else parse_billing_month(month)
        if workers < 1:
            raise CommandError(_("--workers must be at least 1."))
        if workers > 1 and not all_orgs:
            raise CommandError(_("--workers only applies to --all-orgs."))
        return {**options, "month": month, "workers": workers, "all_orgs": all_orgs}

    def run(self, user, via, *, org, all_orgs, month, workers):
        if all_orgs:
            self.progress = Progress(self.stdout)
            try:
                return start_month(
                    month=month,
                    actor=user,
                    via=via,
                    wait=self.wait,
                    workers=workers,
                    on_outcome=self.show,
                )
            finally:
                self.progress.end()
        # Which association, as whom: the resolver's answer (hoa.tenancy).
        (organization,) = organizations_for(user, slug=org, via=via)
        month = month_of(organization, month)
        return generate_monthly_charges(organization=organization, month=month, actor=user, via=via)

    def show(self, outcome, batch):
        if not outcome.held_elsewhere:
            self.progress.step(batch.total)
        if outcome.failed or self.verbosity >= 2:
            self.progress.clear()
        super().show(outcome, batch)


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
