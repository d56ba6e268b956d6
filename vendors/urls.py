from django.urls import path

from vendors import views

app_name = "vendors"

# Included under orgs/<slug:org_slug>/ (hoa/urls.py).
urlpatterns = [
    path("complaints/", views.ComplaintListView.as_view(), name="complaints"),
    path("complaints/<int:pk>/", views.ComplaintDetailView.as_view(), name="complaint"),
    path("complaints/<int:pk>/assign/", views.AssignVendorView.as_view(), name="assign"),
    path("complaints/<int:pk>/status/", views.ChangeStatusView.as_view(), name="status"),
    path("complaints/<int:pk>/notes/", views.AddNoteView.as_view(), name="note"),
    path("complaints/<int:pk>/sla/", views.ChangeSlaView.as_view(), name="sla"),
    path("vendors/", views.VendorListView.as_view(), name="vendors"),
]
