from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from hoa.jobs.scheduled import DEFAULT_PUBLISH_BATCH_SIZE, publish_notices
from hoa.management.scheduled import ScheduledJobCommand


class Command(ScheduledJobCommand):
    help = (
        "Publish notices whose publish time has passed and deliver each once (one pass; "
        "safe to run every minute on any number of hosts)."
    )
    default_batch_size = DEFAULT_PUBLISH_BATCH_SIZE
    job_name = "Notice publisher"

    def run_pass(self, *, wait, batch_size):
        result = publish_notices(batch_size=batch_size, wait=wait)
        if result.skipped:
            return _("another sweep is running (notice publisher)")
        return ngettext(
            "Notice publisher: %(published)d notice published, %(delivered)d delivered.",
            "Notice publisher: %(published)d notices published, %(delivered)d delivered.",
            result.published,
        ) % {"published": result.published, "delivered": result.delivered}
