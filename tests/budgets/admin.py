"""The budgets admin: the budgets (drafts editable, approved ones final), and "Approve the
budget of a year…" on the frame's Organization admin.
"""

from django import forms
from django.contrib import admin
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy

from hoa.admin_actions import fenced_action
from hoa.admin_mixins import FencedRecordAdmin
from hoa.web.fields import ParsedField
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import APPROVE_PERMISSION
from tests.budgets.services import approve_budget, parse_year


class YearForm(forms.Form):
    year = ParsedField(
        parse_year, label=gettext_lazy("Year"), help_text=gettext_lazy("As YYYY, e.g. 2027.")
    )


approve_budget_for_year = fenced_action(
    "approve_budget_for_year",
    YearForm,
    lambda organization, data, **who: approve_budget(organization=organization, **data, **who),
    description=gettext_lazy("Approve the budget of a year…"),
    title=gettext_lazy("Approve the budget of a year"),
    intro=gettext_lazy(
        "Approve these organizations' budgets for the year, and notify their boards. A "
        "budget already approved is left as it is."
    ),
    submit=gettext_lazy("Approve budgets"),
    initial=lambda: {"year": timezone.localdate().year},
    extends="hoa.Organization",  # its admin offers it to users with the permission
    permission=APPROVE_PERMISSION,
)


@admin.register(AnnualBudget)
class AnnualBudgetAdmin(FencedRecordAdmin):
    list_display = ["organization", "year", "amount", "status", "last_fence_token", "approved_by"]
    list_filter = ["status", "organization"]
    list_select_related = ["organization"]
    readonly_fields = ["status", "approved_at", "approved_by", "last_fence_token"]
    # Staff draft budgets here; only the fenced service approves one, and that is final.
    editable = Q(status=AnnualBudget.Status.DRAFT)

    def get_readonly_fields(self, request, obj=None):
        # A budget's association and year name its lease: fixed once it is drafted.
        return [*self.readonly_fields, *(["organization", "year"] if obj else [])]
