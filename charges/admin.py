"""The charges admin: runs and charges (read-only), and "Generate charges for a month…" on
the Organization changelist.

``hoa`` does not know about charges: ``GENERATION`` declares the action for the Organization
admin (``AdminExtension``), and the frame's admin offers it to users with the operation's
permission. The action's first POST shows an intermediate page to choose the month; its
submit runs the service once per selected organization and reports each with the level its
answer deserves.
"""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from charges.exceptions import ChargesError
from charges.forms import ConfirmedMonthForm
from charges.models import MonthlyCharge, MonthlyChargeRun, month_label
from charges.selectors import current_month
from charges.services import generate_monthly_charges
from hoa.admin_mixins import TenantAdminMixin
from hoa.answers import table as answer_table
from hoa.security.ratelimits import check_fenced_post
from hoa.web.access import client_ip

APPLY_FIELD = "apply"


@admin.action(description=gettext_lazy("Generate charges for a month…"))
def generate_charges_for_month(modeladmin, request, queryset):
    """Ask for a month, then generate each selected organization's charges for it."""
    if APPLY_FIELD in request.POST:
        check_fenced_post(request)  # 429 past the user's or the address's limit
        form = ConfirmedMonthForm(request.POST)
        if form.is_valid():
            month = form.cleaned_data["month"]
            for organization in queryset:
                _generate_one(modeladmin, request, organization, month)
            return None  # back to the changelist, which shows the messages
        first_error = next(iter(form.errors.values()))[0]
        modeladmin.message_user(request, first_error, messages.ERROR)
    else:
        form = ConfirmedMonthForm(initial={"month": month_label(current_month())})
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(
        request,
        "charges/admin/generate_charges.html",
        {
            **modeladmin.admin_site.each_context(request),
            "title": _("Generate charges for a month"),
            "subtitle": None,
            "opts": modeladmin.model._meta,
            "selected": queryset,
            "form": form,
            "action_name": generate_charges_for_month.__name__,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "apply_field": APPLY_FIELD,
            "media": modeladmin.media,
        },
    )


def _generate_one(modeladmin, request, organization, month) -> None:
    try:
        result = generate_monthly_charges(
            organization=organization, month=month, actor=request.user, ip=client_ip(request)
        )
    except ChargesError as exc:
        answer_table.admin_message(modeladmin, request, exc)
    else:
        answer_table.admin_done(modeladmin, request, result)


@admin.register(MonthlyChargeRun)
class MonthlyChargeRunAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = [
        "organization",
        "month",
        "status",
        "charge_count",
        "total",
        "last_fence_token",
        "completed_at",
        "completed_by",
    ]
    list_filter = ["status", "organization"]
    search_fields = ["organization__name"]
    list_select_related = ["organization"]
    readonly_fields = [f.name for f in MonthlyChargeRun._meta.fields]

    # Runs are created by the fenced service only, and a completed run is final: no add,
    # no change, no delete (deleting would let a month be billed twice), no "Regenerate".
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MonthlyCharge)
class MonthlyChargeAdmin(TenantAdminMixin, admin.ModelAdmin):
    list_display = ["run", "unit", "amount"]
    list_filter = ["run__organization"]
    search_fields = ["unit__label"]
    list_select_related = ["run__organization", "unit"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
