from django.urls import path

from charges import views

app_name = "charges"

urlpatterns = [
    path("", views.ChargeRunListView.as_view(), name="runs"),
]
