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

import re

from django.core.management.base import CommandError

from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.management.base import (
    ServiceCommand,
    active_user,
    add_actor_argument,
    os_user,
    require_services,
)
from hoa.models import Complaint
from hoa.tenancy import row_for
from vendors import selectors
from vendors.models import Vendor
from vendors.services import assign_vendor

# Ids are positive bigints: at most 19 digits, checked against the limit below.
_ID = re.compile(r"[0-9]{1,19}")
_MAX_ID = 2**63 - 1


class Command(ServiceCommand):
    help = (
        "Assign a vendor to a complaint under the complaint's fenced lease. Exit 0 when "
        "assigned (or already), 75 when busy, stale or changed since the command looked, "
        "1 when assigned to another vendor (without --reassign) or closed, on bad input or "
        "when a service is down."
    )

    def add_arguments(self, parser):
        # Parsed as text and checked in handle(): argparse would exit 2 with a usage dump.
        parser.add_argument("--complaint", metavar="ID", help="the complaint's id")
        parser.add_argument("--vendor", metavar="ID", help="the vendor's id")
        parser.add_argument(
            "--reassign",
            action="store_true",
            help="replace the complaint's current vendor (the one active when the command starts)",
        )
        add_actor_argument(parser)

    def handle(self, *args, **options):
        complaint_id = _parse_id("--complaint", options["complaint"])
        vendor_id = _parse_id("--vendor", options["vendor"])
        require_services()
        actor = active_user(options["actor"])
        via = f"cli:{os_user()}"
        try:
            # Which association, as whom: the complaint's, if it is the actor's (hoa.tenancy).
            rows = Complaint.objects.select_related("organization", "unit")
            complaint = row_for(actor, rows, complaint_id, what="complaint", via=via)
        except Refusal as exc:
            raise answer_table.command_error(exc) from exc
        vendor = Vendor.objects.filter(pk=vendor_id).first()
        if vendor is None:
            raise CommandError(f"No vendor with id {vendor_id}.")
        # What --reassign replaces, fixed before the lease (see the module docstring).
        replacing = selectors.active_assignment(complaint)
        try:
            result = assign_vendor(
                complaint=complaint,
                vendor=vendor,
                actor=actor,
                reassign=options["reassign"],
                replacing=replacing,
                via=via,
            )
        except Refusal as exc:
            raise answer_table.command_error(exc) from exc
        if options["verbosity"] >= 1:
            self.stdout.write(str(result))


def _parse_id(option: str, raw: str | None) -> int:
    if raw is None:
        raise CommandError(f"{option} ID is required.")
    value = raw.strip()
    if not _ID.fullmatch(value) or not 0 < int(value) <= _MAX_ID:
        raise CommandError(f"{option} must be a positive whole number, got {raw[:40]!r}.")
    return int(value)
