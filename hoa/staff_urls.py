from django.urls import path

from hoa.complaints.opt_out import ReporterOptOutView
from hoa.ops import views as ops_views
from hoa.web import views

urlpatterns = [
    path("", views.home, name="home"),
    path("orgs/", views.OrganizationListView.as_view(), name="organizations"),
    path("orgs/<slug:org_slug>/", views.DashboardView.as_view(), name="dashboard"),
    path("ops/locks/", ops_views.LockStatusView.as_view(), name="locks"),
    path("ops/locks/break/", ops_views.BreakLeaseView.as_view(), name="break_lease"),
    path("reporters/opt-out/<str:token>/", ReporterOptOutView.as_view(), name="reporter-opt-out"),
]
