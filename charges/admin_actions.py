"""The Organization admin action "Generate charges for a month…" and its month form.

The action lives in the charges app (``hoa`` must not import ``charges``); charges/admin.py
adds it to ``hoa.admin.OrganizationAdmin``. The first POST from the changelist shows an
intermediate page to choose the month; its submit runs the service once per selected
organization and reports each one with the level its outcome deserves.
"""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from charges.forms import MonthForm
from charges.services import (
    GENERATE_PERMISSION,
    ChargesError,
    GenerationBusy,
    GenerationSuperseded,
    current_month,
    generate_monthly_charges,
)
from hoa.security.ratelimits import check_fenced_post
from hoa.web.access import client_ip

APPLY_FIELD = "apply"


def has_generate_charges_permission(modeladmin, request) -> bool:
    """Whether the action is offered: the ``permissions=["generate_charges"]`` hook."""
    return request.user.has_perm(GENERATE_PERMISSION)


@admin.action(
    description=gettext_lazy("Generate charges for a month…"),
    permissions=["generate_charges"],
)
def generate_charges_for_month(modeladmin, request, queryset):
    """Ask for a month, then generate each selected organization's charges for it."""
    if APPLY_FIELD in request.POST:
        check_fenced_post(request)  # 429 past the user's or the address's limit
        form = MonthForm(request.POST)
        if form.is_valid():
            month = form.cleaned_data["month"]
            for organization in queryset:
                _generate_one(modeladmin, request, organization, month)
            return None  # back to the changelist, which shows the messages
        modeladmin.message_user(request, form.errors["month"][0], messages.ERROR)
    else:
        form = MonthForm(initial={"month": f"{current_month():%Y-%m}"})
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(
        request,
        "charges/admin/generate_charges.html",
        {
            **modeladmin.admin_site.each_context(request),
            "title": _("Generate charges for a month"),
            "subtitle": None,
            "opts": modeladmin.model._meta,
            "queryset": queryset,
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
    except (GenerationBusy, GenerationSuperseded) as exc:
        modeladmin.message_user(request, str(exc), messages.WARNING)
    except ChargesError as exc:  # Redis down, billing failed, not allowed
        modeladmin.message_user(request, str(exc), messages.ERROR)
    else:
        modeladmin.message_user(request, result.message, messages.SUCCESS)
