"""Delete audit records (``FenceEvent``) older than ``FENCE_EVENT_RETENTION_DAYS`` days."""

from locking.management.pruning import PruneCommand
from locking.models import FenceEvent


class Command(PruneCommand):
    help = "Delete fence events (the audit of fenced attempts) older than the retention period."
    model = FenceEvent
    noun = "fence event"
    retention_setting = "FENCE_EVENT_RETENTION_DAYS"
