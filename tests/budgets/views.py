"""Staff pages of budget approval: the association's budgets (and the dashboard's), and the
button that approves one: one service call, its answer from the table (``hoa.answers.table``).
"""

from django.db.models import QuerySet
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views import View
from django.views.generic import ListView

from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.models import Organization
from hoa.security.audit import client_ip, limit_fenced_posts
from hoa.tenancy import OrganizationMixin
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import APPROVE_PERMISSION, OPERATION
from tests.budgets.services import approve_budget, parse_year


def budgets_of(organization: Organization) -> QuerySet:
    """The organization's budgets, newest year first."""
    return AnnualBudget.objects.for_organization(organization).order_by("-year")


def dashboard_context(request, organization: Organization) -> dict:
    """This year's budget on the dashboard."""
    year = timezone.localdate().year
    return {"budget_year": year, "budget": budgets_of(organization).filter(year=year).first()}


class BudgetListView(OrganizationMixin, ListView):
    """The organization's budgets by year, each draft with its approve button."""

    template_name = "budgets/budget_list.html"
    context_object_name = "budgets"

    def get_queryset(self):
        return budgets_of(self.organization)

    def get_context_data(self, **kwargs):
        can_approve = self.request.user.has_perm(APPROVE_PERMISSION)
        return super().get_context_data(can_approve=can_approve, **kwargs)


@method_decorator(limit_fenced_posts, name="dispatch")
class ApproveBudgetView(OrganizationMixin, View):
    """POST: approve the year's budget once; answer 303, 409, 400, 503, 502 or 429. A GET
    (a 409 page's address entered again) leads to the budgets."""

    http_method_names = ["get", "head", "post"]
    permission_required = APPROVE_PERMISSION
    operation = OPERATION

    def get(self, request, *args, **kwargs):
        return redirect("budgets:budgets", self.organization.slug)

    def post(self, request, *args, **kwargs):
        try:
            result = approve_budget(
                organization=self.organization,
                year=parse_year(kwargs["year"]),
                actor=request.user,
                ip=client_ip(request),
            )
        except Refusal as exc:
            return answer_table.page(request, exc)
        budgets_url = reverse("budgets:budgets", args=[self.organization.slug])
        return answer_table.done(request, result, budgets_url)
