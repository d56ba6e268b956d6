"""The budgets admin: the budgets (drafts editable, approved ones final), and "Approve the
budget of a year…" on the Organization changelist.

``hoa`` does not know about budgets: this module adds the action to the Organization admin
(``hoa.admin_mixins.extend``), and the frame's admin offers it, next to any other
operation's, to users with the operation's permission (``hoa.admin_actions.fenced_action``:
its first POST asks for the year, its submit approves each selected organization's).
"""

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.utils import timezone
from django.utils.translation import gettext_lazy

from hoa.admin_actions import fenced_action
from hoa.admin_mixins import AdminExtension, TenantAdminMixin, extend
from tests.budgets.answers import InvalidYear
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import APPROVE_PERMISSION
from tests.budgets.services import approve_budget, parse_year


class YearForm(forms.Form):
    """The admin action's form: the year whose budgets to approve."""

    year = forms.CharField(
        label=gettext_lazy("Year"), max_length=4, help_text=gettext_lazy("As YYYY, e.g. 2027.")
    )

    def clean_year(self):
        try:
            return parse_year(self.cleaned_data["year"])
        except InvalidYear as exc:
            raise forms.ValidationError(exc.message, code="invalid_year") from exc


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
)


extend(
    AdminExtension(
        "hoa.Organization", permission=APPROVE_PERMISSION, actions=(approve_budget_for_year,)
    )
)


@admin.register(AnnualBudget)
class AnnualBudgetAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["organization", "year", "amount", "status", "last_fence_token", "approved_by"]
    list_filter = ["status", "organization"]
    list_select_related = ["organization"]
    readonly_fields = ["status", "approved_at", "approved_by", "last_fence_token"]

    def get_readonly_fields(self, request, obj=None):
        # A budget's association and year name its lease: fixed once it is drafted.
        return [*self.readonly_fields, *(["organization", "year"] if obj else [])]

    # Staff draft budgets here; only the fenced service approves one, and an approved
    # budget is final: no change, and no delete (it is the record of what was approved).
    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and not (obj and obj.is_approved)

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        # The form may have been opened on a draft approved since. The approval's fence
        # UPDATE takes this row lock too, so whichever comes second sees the other.
        drafts = AnnualBudget.objects.select_for_update().filter(status=AnnualBudget.Status.DRAFT)
        if change and not drafts.filter(pk=obj.pk).exists():
            raise PermissionDenied
        super().save_model(request, obj, form, change)
