"""Pay approved vendor invoices from cron: one (``--invoice ID``), one association's
(``--org SLUG``) or every association's (``--all-orgs``) due within ``--due-within`` days,
each exactly once. Its exit codes and lines are the frame's (``BatchCommand``); the
schedule and what each answer means: docs/operations.md.
"""

from datetime import timedelta

from django.conf import settings
from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from hoa.management.base import BatchCommand, parse_id
from hoa.security.audit import shown
from hoa.tenancy import organizations_for, row_for
from vendors.models import Invoice
from vendors.operations import PAYMENT
from vendors.payment_run import pay_approved
from vendors.payments import pay_invoice

MAX_DUE_WITHIN = 366


class Command(BatchCommand):
    help = (
        "Pay approved vendor invoices exactly once: one (--invoice ID), one association's "
        "(--org SLUG) or every association's (--all-orgs), those due within --due-within "
        "days. Exit 0 done, 75 busy elsewhere (try again later), 1 bad input, a failed "
        "payment, Redis down or no payment service."
    )
    operation = PAYMENT
    items = "invoices"
    batch_targets = "--org or --all-orgs"

    def add_own_arguments(self, parser, target):
        target.add_argument("--invoice", metavar="ID", help="the invoice's id")
        parser.add_argument(
            "--due-within",
            metavar="DAYS",
            default="0",
            help="with --org or --all-orgs: pay the invoices due within DAYS of each "
            "association's today (default 0: due today or overdue)",
        )

    def parse(self, *, invoice, due_within, **options):
        invoice_id = parse_id("--invoice", invoice) if invoice is not None else None
        return {**options, "invoice_id": invoice_id, "days": _parse_days(due_within)}

    def run(self, user, via, *, invoice_id, org, all_orgs, days):
        # Which association(s), as whom: the resolver's answer (hoa.tenancy).
        if invoice_id is not None:
            rows = Invoice.objects.select_related("organization", "vendor")
            invoice = row_for(user, rows, invoice_id, what="invoice", via=via)
            return pay_invoice(invoice=invoice, actor=user, via=via)
        organizations = organizations_for(user, slug=org, every=all_orgs, via=via)
        if not settings.VENDOR_PAYMENT_URL:  # said now, not when something falls due
            raise CommandError(
                _("No payment service is configured (VENDOR_PAYMENT_URL); nothing was paid.")
            )
        return pay_approved(
            organizations=organizations,
            actor=user,
            via=via,
            due_within=timedelta(days=days),
            wait=self.wait,
            on_outcome=self.show,
        )


def _parse_days(raw: str) -> int:
    value = raw.strip()
    if not value.isascii() or not value.isdigit() or int(value) > MAX_DUE_WITHIN:
        raise CommandError(
            _("--due-within must be a whole number of days from 0 to %(max)d, got %(raw)r.")
            % {"max": MAX_DUE_WITHIN, "raw": shown(raw)}
        )
    return int(value)
