"""``manage.py approve_budget --org SLUG --year YYYY [--actor USERNAME]``

Exit status (through the answer table): 0 approved or already approved; 75 (EX_TEMPFAIL)
busy, superseded by a newer holder or changed meanwhile, try again later; 1 bad input, not
allowed, Redis down or the board could not be notified. One line, never a traceback.
"""

from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.management.base import (
    ServiceCommand,
    active_user,
    add_actor_argument,
    os_user,
    require_services,
)
from hoa.tenancy import organizations_for
from tests.budgets.forms import parse_year
from tests.budgets.services import approve_budget


class Command(ServiceCommand):
    help = (
        "Approve an organization's budget for a year, exactly once, and notify its board. "
        "Exit 0 done or already done, 75 busy or superseded (try again later), 1 bad input, "
        "not allowed, Redis down or notification failure."
    )

    def add_arguments(self, parser):
        parser.add_argument("--org", metavar="SLUG", required=True, help="the organization's slug")
        parser.add_argument("--year", metavar="YYYY", required=True, help="the budget's year")
        add_actor_argument(parser)

    def handle(self, *args, org, year, actor, **options):
        try:
            year = parse_year(year)
        except Refusal as exc:
            raise answer_table.command_error(exc) from exc
        require_services()
        user, via = active_user(actor), f"cli:{os_user()}"
        try:
            # Which association, as whom: the resolver's answer (hoa.tenancy).
            (organization,) = organizations_for(user, slug=org, via=via)
            result = approve_budget(organization=organization, year=year, actor=user, via=via)
        except Refusal as exc:
            raise answer_table.command_error(exc) from exc
        if options["verbosity"] >= 1:
            self.stdout.write(result.message)
