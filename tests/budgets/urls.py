from django.urls import path

from tests.budgets import views

app_name = "budgets"

# Included under orgs/<slug:org_slug>/budgets/ (tests/urls.py). ``year`` is any path
# segment: the view answers 400 for a malformed one, not 404.
urlpatterns = [
    path("", views.BudgetListView.as_view(), name="budgets"),
    path("<str:year>/approve/", views.ApproveBudgetView.as_view(), name="approve"),
]
