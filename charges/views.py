from django.views.generic import ListView

from charges.models import MonthlyChargeRun
from hoa.access import OrganizationMixin


class ChargeRunListView(OrganizationMixin, ListView):
    template_name = "charges/run_list.html"
    context_object_name = "runs"

    def get_queryset(self):
        return MonthlyChargeRun.objects.for_organization(self.organization)
