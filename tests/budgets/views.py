"""Staff pages of budget approval: the association's budgets, and the button that approves one.

The approve view is thin: the organization and permission checks come from
``OrganizationMixin`` (404 for an organization the user is not staff of, 403 without the
permission), the year is parsed, one service call does the work, and each outcome maps to
one answer (``hoa.answers.table``): 303 to the budgets, 409 busy, superseded or changed,
400 bad year or no budget, 503 Redis down, 502 the board could not be notified.
"""

from django.shortcuts import redirect
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.generic import ListView

from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.security.ratelimits import limit_fenced_posts
from hoa.web.access import OrganizationMixin, client_ip
from tests.budgets import selectors
from tests.budgets.operations import APPROVE_PERMISSION, OPERATION
from tests.budgets.services import approve_budget, parse_year


class BudgetListView(OrganizationMixin, ListView):
    """The organization's budgets by year, each draft with its approve button."""

    template_name = "budgets/budget_list.html"
    context_object_name = "budgets"

    def get_queryset(self):
        return selectors.budgets_of(self.organization)

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
