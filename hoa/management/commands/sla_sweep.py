from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from hoa.jobs.scheduled import DEFAULT_SWEEP_BATCH_SIZE, sweep_sla
from hoa.management.scheduled import ScheduledJobCommand


class Command(ScheduledJobCommand):
    help = (
        "Mark open complaints past their SLA deadline as breached (one pass; safe to run "
        "every minute on any number of hosts)."
    )
    default_batch_size = DEFAULT_SWEEP_BATCH_SIZE
    job_name = "SLA sweep"

    def run_pass(self, *, wait, batch_size):
        result = sweep_sla(batch_size=batch_size, wait=wait)
        if result.skipped:
            return _("another sweep is running")
        return ngettext(
            "SLA sweep: %(count)d complaint marked breached.",
            "SLA sweep: %(count)d complaints marked breached.",
            result.breached,
        ) % {"count": result.breached}
