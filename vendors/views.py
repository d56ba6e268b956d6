from django.views.generic import ListView

from hoa.access import OrganizationMixin
from hoa.models import Complaint


class ComplaintListView(OrganizationMixin, ListView):
    template_name = "vendors/complaint_list.html"
    context_object_name = "complaints"

    def get_queryset(self):
        return Complaint.objects.for_organization(self.organization).select_related("unit")
