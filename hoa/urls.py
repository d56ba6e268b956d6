from django.contrib import admin
from django.urls import include, path

from hoa import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("", include(("hoa.staff_urls", "hoa"), namespace="hoa")),
    path("orgs/<slug:org_slug>/charges/", include("charges.urls")),
    path("orgs/<slug:org_slug>/", include("vendors.urls")),
]

handler400 = "hoa.views.bad_request"
handler403 = "hoa.views.permission_denied"
handler404 = "hoa.views.page_not_found"
handler500 = "hoa.views.server_error"
