"""``manage.py approve_budget --org SLUG --year YYYY [--actor USERNAME]``: see ``help``."""

from hoa.management.base import OperationCommand
from hoa.tenancy import organizations_for
from tests.budgets.services import approve_budget, parse_year


class Command(OperationCommand):
    help = (
        "Approve an organization's budget for a year, exactly once, and notify its board. "
        "Exit 0 done or already done, 75 busy or superseded (try again later), 1 bad input, "
        "not allowed, Redis down or notification failure."
    )

    def add_arguments(self, parser):
        parser.add_argument("--org", metavar="SLUG", required=True, help="the organization's slug")
        parser.add_argument("--year", metavar="YYYY", required=True, help="the budget's year")
        super().add_arguments(parser)  # --actor

    def parse(self, *, org, year):
        return {"org": org, "year": parse_year(year)}

    def run(self, user, via, *, org, year):
        # Which association, as whom: the resolver's answer (hoa.tenancy).
        (organization,) = organizations_for(user, slug=org, via=via)
        result = approve_budget(organization=organization, year=year, actor=user, via=via)
        return result.message
