"""Delete refusal records (``AccessDenial``) older than ``ACCESS_DENIAL_RETENTION_DAYS``."""

from hoa.management.pruning import PruneCommand
from hoa.models import AccessDenial


class Command(PruneCommand):
    help = "Delete access denials (the audit of refused requests) older than the retention period."
    model = AccessDenial
    noun = "access denial"
    deleted = ("Deleted %(count)d access denial", "Deleted %(count)d access denials")
    would_delete = ("Would delete %(count)d access denial", "Would delete %(count)d access denials")
    retention_setting = "ACCESS_DENIAL_RETENTION_DAYS"
