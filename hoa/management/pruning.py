"""A base for the commands that delete audit rows older than a retention period.

``prune_access_denials`` is this command with a model, a noun and a setting (``locking``'s
``prune_fence_events`` has the same options and messages, and stands alone). Run them from
cron, e.g. daily; ``--days N`` overrides the setting, ``--dry-run`` only counts (and says
so at any verbosity). Quiet on success when unattended (``CronCommand``).
"""

from datetime import timedelta

from django.conf import settings
from django.core.management.base import CommandError
from django.db import DatabaseError
from django.utils import timezone
from django.utils.translation import ngettext

from hoa.dates import when
from hoa.management.base import CronCommand


def retention_days(raw) -> int:
    """Return ``raw`` as a whole number of days of at least 1, else raise ``CommandError``."""
    try:
        days = int(str(raw).strip())
    except ValueError:
        raise CommandError(f"--days must be a whole number of days, got {raw!r}.") from None
    if days < 1:
        raise CommandError(f"--days must be at least 1, got {days}.")
    return days


class PruneCommand(CronCommand):
    """Delete rows of ``model`` whose ``at`` is older than ``retention_setting`` days."""

    model: type  # a model with an indexed ``at`` timestamp and no rows that point at it
    noun: str  # "access denial", for the error line
    # The summary line's singular and plural (ngettext): "Deleted 1 access denial", …
    deleted: tuple[str, str]
    would_delete: tuple[str, str]
    retention_setting: str  # the settings name of the default number of days

    def add_arguments(self, parser):
        # Parsed as text and checked in handle(): bad input is a one-line error, exit 1.
        parser.add_argument(
            "--days",
            default=None,
            help=f"Keep this many days (default: {self.retention_setting}).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only report how many rows would be deleted.",
        )

    def handle(self, *args, days=None, dry_run=False, **options):
        if days is None:
            days = getattr(settings, self.retention_setting)
        days = retention_days(days)
        cutoff = timezone.now() - timedelta(days=days)
        old_rows = self.model.objects.filter(at__lt=cutoff)
        try:
            if dry_run:
                count = old_rows.count()
            else:
                # No relations and no signals: Django issues one DELETE … WHERE at < cutoff.
                count, _ = old_rows.delete()
        except DatabaseError as exc:
            first_line = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
            raise CommandError(f"Could not prune {self.noun}s: {first_line}") from exc
        if dry_run or options["verbosity"] >= 1:
            rows = ngettext(*(self.would_delete if dry_run else self.deleted), count)
            kept = ngettext("older than %(days)d day", "older than %(days)d days", days)
            self.stdout.write(
                f"{rows % {'count': count}} {kept % {'days': days}} (before {when(cutoff)})."
            )
