from django.urls import path

from charges import views

app_name = "charges"

# ``month`` is any path segment: the views answer 400 for a malformed one, not 404.
urlpatterns = [
    path("", views.ChargeRunListView.as_view(), name="runs"),
    path("<str:month>/", views.ChargeRunDetailView.as_view(), name="run"),
    path("<str:month>/generate/", views.GenerateChargesView.as_view(), name="generate"),
    path("<str:month>/charges.csv", views.ChargeRunCsvView.as_view(), name="csv"),
]
