"""``manage.py send_reporter_emails``: send the queued emails to complaints' reporters.

One pass of the outbox sender (hoa/jobs/reporter_mail.py): safe to run every minute on any
number of hosts (a PostgreSQL advisory lock keeps passes apart, and each email is claimed
in the database before it is handed over). Exit 0 (a skipped pass too); 1 with one line
when PostgreSQL is unreachable or an option is bad. Quiet on success when unattended
(``-v 1`` prints the counts).

``--every SECONDS`` runs a pass every SECONDS until stopped, for ``make run`` (production
runs one pass per minute from cron or the systemd timer). A pass that fails prints its
line and the next one runs; a pass that had nothing to do prints nothing; SIGTERM or
Ctrl-C stops it between passes, never in the middle of a hand-over.
"""

import signal
import threading

from django.core.management.base import CommandError
from django.db import close_old_connections
from django.utils.translation import gettext as _

from hoa.jobs.reporter_mail import DEFAULT_BATCH_SIZE, send_reporter_emails
from hoa.management.scheduled import ScheduledJobCommand, parse_seconds

MAX_EVERY_SECONDS = 3600


def parse_every(raw: str | None) -> float | None:
    """Return the ``--every`` option in seconds (``None``: one pass)."""
    return parse_seconds(raw, "--every", MAX_EVERY_SECONDS)


class Command(ScheduledJobCommand):
    help = (
        "Send the queued emails to complaints' reporters, each once (one pass; safe to run "
        "every minute on any number of hosts)."
    )
    default_batch_size = DEFAULT_BATCH_SIZE
    job_name = "Reporter emails"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument(
            "--every",
            metavar="SECONDS",
            help="Run a pass every SECONDS until stopped (make run's development loop), "
            "printing only the passes that did something.",
        )

    def handle(self, *args, **options):
        every = parse_every(options["every"])
        if every is None:
            return super().handle(*args, **options)
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored: a background job
            signal.signal(signal.SIGINT, lambda *_: stopped.set())
        self.quiet_when_idle = True
        while True:
            try:
                super().handle(*args, **options)
            except CommandError as exc:
                self.stderr.write(f"CommandError: {exc}")
            finally:
                close_old_connections()
            if stopped.wait(every):
                return

    quiet_when_idle = False  # one pass prints its counts even when they are all 0

    def run_pass(self, *, wait, batch_size):
        result = send_reporter_emails(batch_size=batch_size, wait=wait)
        if result.skipped_pass:
            return "" if self.quiet_when_idle else _("another sender is running (reporter emails)")
        counts = {
            "sent": result.sent,
            "retrying": result.retrying,
            "failed": result.failed,
            "unknown": result.unknown,
            "skipped": result.skipped,
        }
        if self.quiet_when_idle and not any(counts.values()):
            return ""
        return (
            _(
                "Reporter emails: %(sent)d sent, %(retrying)d to retry, %(failed)d failed, "
                "%(unknown)d perhaps sent, %(skipped)d skipped (opted out)."
            )
            % counts
        )
