from django.urls import path

from hoa.complaints import views

app_name = "complaints"

# Included under orgs/<slug:org_slug>/ (hoa/urls.py).
urlpatterns = [
    path("complaints/", views.ComplaintListView.as_view(), name="complaints"),
    path("complaints/new/", views.NewComplaintView.as_view(), name="new"),
    path("complaints/<id:pk>/", views.ComplaintDetailView.as_view(), name="complaint"),
    path("complaints/<id:pk>/status/", views.ChangeStatusView.as_view(), name="status"),
    path("complaints/<id:pk>/notes/", views.AddNoteView.as_view(), name="note"),
    path("complaints/<id:pk>/sla/", views.ChangeSlaView.as_view(), name="sla"),
]
