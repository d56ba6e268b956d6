"""``manage.py record_insurance_lapses [--wait SECONDS]``: the daily insurance check.

Records every vendor certificate that has lapsed (``vendors.insurance.record_lapses``),
once, with a line on the timeline of each invoice its association still owes the vendor.
Safe on any number of hosts: a pass takes a PostgreSQL advisory lock, and a host that finds
it taken skips its pass and exits 0. Exit 1 with one line when PostgreSQL is unreachable or
an option is bad. Quiet from cron on success (``-v 1`` prints the summary).
"""

from django.core.management.base import CommandError
from django.db import DatabaseError, InterfaceError
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from hoa.management.base import CronCommand, first_line, require_services
from hoa.management.scheduled import parse_wait
from vendors.insurance import record_lapses


class Command(CronCommand):
    help = (
        "Record the vendors' insurance certificates that have lapsed, on the timelines of "
        "the invoices their associations still owe them (one pass; safe on any number of "
        "hosts)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--wait",
            metavar="SECONDS",
            help="If another host is running this job, wait up to SECONDS for it to finish "
            "instead of skipping the pass.",
        )

    def handle(self, *args, **options):
        wait = parse_wait(options["wait"])
        require_services(redis=False)
        try:
            result = record_lapses(wait=wait)
        except (DatabaseError, InterfaceError) as exc:
            raise CommandError(
                _("Insurance check failed: PostgreSQL error: %(error)s")
                % {"error": first_line(exc)}
            ) from exc
        if options["verbosity"] < 1:
            return
        if result.skipped:
            self.stdout.write(_("another insurance check is running"))
            return
        self.stdout.write(
            ngettext(
                "Insurance check: %(count)d lapse recorded.",
                "Insurance check: %(count)d lapses recorded.",
                result.lapses,
            )
            % {"count": result.lapses}
        )
