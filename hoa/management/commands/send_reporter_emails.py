"""``manage.py send_reporter_emails``: send the queued emails to complaints' reporters.

One pass of the outbox sender (hoa/jobs/reporter_mail.py): safe to run every minute on any
number of hosts (a PostgreSQL advisory lock keeps passes apart, and each email is claimed
in the database before it is handed over). Exit 0 (a skipped pass too); 1 with one line
when PostgreSQL is unreachable or an option is bad. Quiet on success when unattended
(``-v 1`` prints the counts).
"""

from django.utils.translation import gettext as _

from hoa.jobs.reporter_mail import DEFAULT_BATCH_SIZE, send_reporter_emails
from hoa.management.scheduled import ScheduledJobCommand


class Command(ScheduledJobCommand):
    help = (
        "Send the queued emails to complaints' reporters, each once (one pass; safe to run "
        "every minute on any number of hosts)."
    )
    default_batch_size = DEFAULT_BATCH_SIZE
    job_name = "Reporter emails"

    def run_pass(self, *, wait, batch_size):
        result = send_reporter_emails(batch_size=batch_size, wait=wait)
        if result.skipped_pass:
            return _("another sender is running (reporter emails)")
        return _(
            "Reporter emails: %(sent)d sent, %(retrying)d to retry, %(failed)d failed, "
            "%(unknown)d perhaps sent, %(skipped)d skipped (opted out)."
        ) % {
            "sent": result.sent,
            "retrying": result.retrying,
            "failed": result.failed,
            "unknown": result.unknown,
            "skipped": result.skipped,
        }
