from django.contrib import admin
from django.http import JsonResponse
from django.urls import path

from locking.receiving import fenced_receiver

RECEIVER_SECRET = "receiver-tests-secret"


@fenced_receiver("billing-view", secret=RECEIVER_SECRET)
def billing_view(request, call):
    """A receiving service's view, for locking/tests/test_receiver.py."""
    return JsonResponse({"accepted": call.token, "replaces": call.replaces})


urlpatterns = [
    path("admin/", admin.site.urls),
    path("receiver/billing/", billing_view),
]
