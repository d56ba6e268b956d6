from django.urls import path

from vendors import views

app_name = "vendors"

# Included under orgs/<slug:org_slug>/ (hoa/urls.py).
urlpatterns = [
    path("complaints/<id:pk>/assign/", views.AssignVendorView.as_view(), name="assign"),
    path("vendors/", views.VendorListView.as_view(), name="vendors"),
]
