"""Delete audit records (``FenceEvent``) older than ``LOCK_FENCE_EVENT_RETENTION_DAYS`` days.

Run it from cron, e.g. daily; ``--days N`` overrides the setting, ``--dry-run`` only counts.
Quiet on success when unattended (``locking.management.quiet``); ``-v 1`` prints the count.
"""

from datetime import timedelta

from django.core.management.base import CommandError
from django.db import DatabaseError
from django.utils import timezone
from django.utils.translation import ngettext

from locking.conf import setting
from locking.management.quiet import QuietCommand
from locking.models import FenceEvent


def retention_days(raw) -> int:
    """Return ``raw`` as a whole number of days of at least 1, else raise ``CommandError``."""
    try:
        days = int(str(raw).strip())
    except ValueError:
        raise CommandError(f"--days must be a whole number of days, got {raw!r}.") from None
    if days < 1:
        raise CommandError(f"--days must be at least 1, got {days}.")
    return days


class Command(QuietCommand):
    help = "Delete fence events (the audit of fenced attempts) older than the retention period."

    def add_arguments(self, parser):
        # Parsed as text and checked in handle(): bad input is a one-line error, exit 1.
        parser.add_argument(
            "--days",
            default=None,
            help="Keep this many days (default: LOCK_FENCE_EVENT_RETENTION_DAYS, 90).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only report how many events would be deleted.",
        )

    def handle(self, *args, days=None, dry_run=False, **options):
        if days is None:
            days = setting("LOCK_FENCE_EVENT_RETENTION_DAYS")
        days = retention_days(days)
        cutoff = timezone.now() - timedelta(days=days)
        old_events = FenceEvent.objects.using(setting("LOCK_DATABASE")).filter(at__lt=cutoff)
        try:
            if dry_run:
                count = old_events.count()
            else:
                # No relations and no signals: Django issues one DELETE … WHERE at < cutoff.
                count, _ = old_events.delete()
        except DatabaseError as exc:
            first_line = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
            raise CommandError(f"Could not prune fence events: {first_line}") from exc
        if dry_run or options["verbosity"] >= 1:
            self.stdout.write(pruned_line(count, days, cutoff, dry_run=dry_run))


def pruned_line(count: int, days: int, cutoff, *, dry_run: bool) -> str:
    """``Deleted 1 fence event older than 90 days (before …).``, plurals right."""
    if dry_run:
        events = ngettext(
            "Would delete %(count)d fence event", "Would delete %(count)d fence events", count
        )
    else:
        events = ngettext("Deleted %(count)d fence event", "Deleted %(count)d fence events", count)
    kept = ngettext("older than %(days)d day", "older than %(days)d days", days)
    return (
        f"{events % {'count': count}} {kept % {'days': days}} (before {cutoff:%Y-%m-%d %H:%M} UTC)."
    )
