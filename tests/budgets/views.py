"""Staff pages of budget approval: the association's budgets, each draft's approve button."""

from django.urls import reverse
from django.views.generic import ListView

from hoa.tenancy import OrganizationMixin
from hoa.web.posts import FencedPostView
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import APPROVE_PERMISSION, OPERATION
from tests.budgets.services import approve_budget, parse_year


class BudgetListView(OrganizationMixin, ListView):
    """The organization's budgets by year, each draft with its approve button."""

    template_name = "budgets/budget_list.html"
    context_object_name = "budgets"

    def get_queryset(self):
        return AnnualBudget.objects.for_organization(self.organization).order_by("-year")


class ApproveBudgetView(FencedPostView):
    """POST: approve the year's budget once; its answers are ``FencedPostView``'s."""

    permission_required = APPROVE_PERMISSION
    operation = OPERATION

    def back_url(self, **kwargs) -> str:
        return reverse("budgets:budgets", args=[self.organization.slug])

    def run(self, request, **kwargs):
        year = parse_year(kwargs["year"])
        return approve_budget(year=year, **self.caller(request))
