"""The shape shared by the scheduled-job commands (``sla_sweep``, ``publish_notices``).

They run from cron or a systemd timer on any number of hosts: a skipped pass (another
host holds the advisory lock) is normal and exits 0; bad options and an unreachable
database exit 1 with one line on stderr.
"""

import math
from datetime import timedelta

from django.core.management.base import CommandError
from django.db import DatabaseError, InterfaceError
from django.utils.translation import gettext as _

from hoa.management.base import CronCommand, first_line, require_services

MAX_WAIT_SECONDS = 3600
MAX_BATCH_SIZE = 10_000


def parse_seconds(raw: str | None, option: str, most: int) -> float | None:
    """Return ``option``'s value in seconds, above 0 and at most ``most`` (``None``: not
    given); ``CommandError`` in one line otherwise."""
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or not 0 < seconds <= most:
        raise CommandError(
            _("%(option)s must be a number of seconds above 0 and at most %(max)d, got %(raw)r.")
            % {"option": option, "max": most, "raw": raw}
        )
    return seconds


def parse_wait(raw: str | None) -> timedelta | None:
    """Return the ``--wait`` option as a timedelta (``None``: do not wait)."""
    seconds = parse_seconds(raw, "--wait", MAX_WAIT_SECONDS)
    return None if seconds is None else timedelta(seconds=seconds)


def parse_batch_size(raw: str) -> int:
    """Return the ``--batch-size`` option as an int."""
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if not 1 <= size <= MAX_BATCH_SIZE:
        raise CommandError(
            _("--batch-size must be a whole number from 1 to %(max)d, got %(raw)r.")
            % {"max": MAX_BATCH_SIZE, "raw": raw}
        )
    return size


class ScheduledJobCommand(CronCommand):
    """Parse ``--wait``/``--batch-size``, check PostgreSQL, run one pass, print its outcome."""

    default_batch_size: int
    job_name: str  # for the error line, e.g. "SLA sweep"

    def add_arguments(self, parser):
        # Parsed in handle(), not by argparse: its errors exit 2 with a usage dump.
        parser.add_argument(
            "--wait",
            metavar="SECONDS",
            help="If another host is running this job, wait up to SECONDS for it to finish "
            "instead of skipping the pass.",
        )
        parser.add_argument(
            "--batch-size",
            metavar="N",
            default=str(self.default_batch_size),
            help=f"Rows per transaction (default {self.default_batch_size}).",
        )

    def handle(self, *args, **options):
        wait = parse_wait(options["wait"])
        batch_size = parse_batch_size(options["batch_size"])
        require_services(redis=False)
        try:
            message = self.run_pass(wait=wait, batch_size=batch_size)
        except (DatabaseError, InterfaceError) as exc:
            raise CommandError(
                _("%(job)s failed: PostgreSQL error: %(error)s")
                % {"job": self.job_name, "error": first_line(exc)}
            ) from exc
        if options["verbosity"] >= 1 and message:
            self.stdout.write(message)

    def run_pass(self, *, wait: timedelta | None, batch_size: int) -> str:
        """Run one pass of the job and return the line to print ("": nothing to say)."""
        raise NotImplementedError
