from django.urls import path

from vendors import views

app_name = "vendors"

urlpatterns = [
    path("complaints/", views.ComplaintListView.as_view(), name="complaints"),
]
