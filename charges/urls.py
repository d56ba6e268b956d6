from django.urls import path

from charges import views

app_name = "charges"

# ``month`` is any path segment: the views answer 400 for what is no month ("Not a month",
# saying how to write one) and 404 for another spelling of one (charges.forms.month_of_address).
urlpatterns = [
    path("", views.ChargeRunListView.as_view(), name="runs"),
    path("<str:month>/", views.ChargeRunDetailView.as_view(), name="run"),
    path("<str:month>/generate/", views.GenerateChargesView.as_view(), name="generate"),
    path("<str:month>/charges.csv", views.ChargeRunCsvView.as_view(), name="csv"),
]
