"""``manage.py assign_vendor --complaint ID --vendor ID [--reassign] [--actor USERNAME]``

Exit status: 0 assigned (or already assigned to that vendor); 75 (EX_TEMPFAIL) busy, stale,
or (with ``--reassign``) another vendor assigned after the command looked: trying again
may succeed; 1 what trying again cannot change: assigned to another vendor without
``--reassign`` (audited as a conflict), a complaint that is closed (reopen it first) or was
closed after the command looked; bad input, not allowed, or Redis, PostgreSQL or the
dispatch service down. One line on stdout or stderr, never a traceback.

``--reassign`` replaces the vendor that is active when the command starts, and only that
one: the command reads it before taking the lease, and an assignment committed in between
(by an older holder still finishing) is reported, not replaced.
"""

from django.core.management.base import CommandError

from hoa.management.base import OperationCommand, parse_id
from hoa.models import Complaint
from hoa.tenancy import row_for
from vendors import selectors
from vendors.models import Vendor
from vendors.services import assign_vendor


class Command(OperationCommand):
    help = (
        "Assign a vendor to a complaint under the complaint's fenced lease. Exit 0 when "
        "assigned (or already), 75 when busy, stale or changed since the command looked, "
        "1 when assigned to another vendor (without --reassign) or closed, on bad input or "
        "when a service is down."
    )

    def add_arguments(self, parser):
        # Parsed as text (parse_id): argparse would exit 2 with a usage dump.
        parser.add_argument("--complaint", metavar="ID", help="the complaint's id")
        parser.add_argument("--vendor", metavar="ID", help="the vendor's id")
        parser.add_argument(
            "--reassign",
            action="store_true",
            help="replace the complaint's current vendor (the one active when the command starts)",
        )
        super().add_arguments(parser)  # --actor

    def parse(self, *, complaint, vendor, reassign):
        ids = {"complaint_id": parse_id("--complaint", complaint)}
        return {**ids, "vendor_id": parse_id("--vendor", vendor), "reassign": reassign}

    def run(self, user, via, *, complaint_id, vendor_id, reassign):
        # Which association, as whom: the complaint's, if it is the actor's (hoa.tenancy).
        rows = Complaint.objects.select_related("organization", "unit")
        complaint = row_for(user, rows, complaint_id, what="complaint", via=via)
        vendor = Vendor.objects.filter(pk=vendor_id).first()
        if vendor is None:
            raise CommandError(f"No vendor with id {vendor_id}.")
        # What --reassign replaces, fixed before the lease (see the module docstring).
        replacing = selectors.active_assignment(complaint)
        return assign_vendor(
            complaint=complaint,
            vendor=vendor,
            actor=user,
            reassign=reassign,
            replacing=replacing,
            via=via,
        )
