"""Delete refusal records (``AccessDenial``) older than ``ACCESS_DENIAL_RETENTION_DAYS``."""

from hoa.management.pruning import PruneCommand
from hoa.models import AccessDenial


class Command(PruneCommand):
    help = "Delete access denials (the audit of refused requests) older than the retention period."
    model = AccessDenial
    noun = "access denial"
    retention_setting = "ACCESS_DENIAL_RETENTION_DAYS"
