"""Erase the reporters' email and phone of complaints closed ``REPORTER_RETENTION_DAYS`` ago,
and the emails sent to them (the outbox rows, which hold the address and what was said).

Run it from cron, daily. The reporter's name stays with the complaint and its timeline
("opened by alice for Ana Ruiz"); the contact details are only needed while the complaint
is worked on. ``--days N`` overrides the setting, ``--dry-run`` only counts. Quiet on
success (``-v 1`` prints the count).
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import ngettext

from hoa.management.base import CronCommand
from hoa.management.pruning import retention_days
from hoa.models import Complaint, ReporterEmail


class Command(CronCommand):
    help = (
        "Erase the reporter's email and phone of complaints closed longer ago than the retention."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--days", default=None, help="Keep this many days (default: REPORTER_RETENTION_DAYS)."
        )
        parser.add_argument("--dry-run", action="store_true", help="Only count.")

    def handle(self, *args, days=None, dry_run=False, **options):
        days = retention_days(settings.REPORTER_RETENTION_DAYS if days is None else days)
        cutoff = timezone.now() - timedelta(days=days)
        closed = Complaint.objects.filter(status=Complaint.Status.CLOSED, closed_at__lt=cutoff)
        with_contact = closed.exclude(reporter_email="", reporter_phone="")
        # The emails to the reporter hold the address and what they were told.
        emails = ReporterEmail.objects.filter(complaint__in=closed.values("pk"))
        if dry_run:
            count, erased = with_contact.count(), emails.count()
        else:
            with transaction.atomic():
                count = with_contact.update(reporter_email="", reporter_phone="")
                erased, _ = emails.delete()
        if dry_run or options["verbosity"] >= 1:
            facts = {"count": count, "cutoff": f"{cutoff:%Y-%m-%d}"}
            if dry_run:
                line = ngettext(
                    "Would erase the contact of %(count)d reporter (closed before %(cutoff)s)",
                    "Would erase the contact of %(count)d reporters (closed before %(cutoff)s)",
                    count,
                )
                mails = ngettext(
                    "and %(emails)d email to them.", "and %(emails)d emails to them.", erased
                )
            else:
                line = ngettext(
                    "Erased the contact of %(count)d reporter (closed before %(cutoff)s)",
                    "Erased the contact of %(count)d reporters (closed before %(cutoff)s)",
                    count,
                )
                mails = ngettext(
                    "and %(emails)d email to them.", "and %(emails)d emails to them.", erased
                )
            self.stdout.write(f"{line % facts} {mails % {'emails': erased}}")
