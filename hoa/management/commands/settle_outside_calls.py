"""Settle the outside calls whose outcome is not known yet (``hoa.jobs.settling``)."""

from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from hoa.answers.table import EXIT_TEMPFAIL
from hoa.jobs.settling import DEFAULT_SETTLE_BATCH_SIZE, settle_outside_calls
from hoa.management.base import require_services
from hoa.management.scheduled import ScheduledJobCommand


class Command(ScheduledJobCommand):
    help = (
        "Settle the outside calls (billing, dispatch, payment) whose outcome is not known "
        "yet, by the same idempotency key: made again, or taken back. Exit 0 when none is "
        "left, 75 when some are still unknown."
    )
    default_batch_size = DEFAULT_SETTLE_BATCH_SIZE
    job_name = "Settling outside calls"

    def run_pass(self, *, wait, batch_size):
        require_services()  # settling runs the operations: Redis too
        result = settle_outside_calls(batch_size=batch_size, wait=wait)
        if result.skipped:
            return _("another pass is settling")
        if result.left:
            raise CommandError(
                _("%(settled)d outside call(s) settled; %(left)d still not known.")
                % {"settled": result.settled, "left": result.left},
                returncode=EXIT_TEMPFAIL,
            )
        return _("%(settled)d outside call(s) settled.") % {"settled": result.settled}
