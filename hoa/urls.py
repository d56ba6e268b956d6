from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from hoa.ops import metrics_view
from hoa.ops import views as ops_views
from hoa.security.audit import limit_sign_ins
from hoa.web.accounts import PasswordResetView

urlpatterns = [
    # Both sign-in forms, rate limited and locked after repeated failures (hoa.security.audit),
    # and the password reset form; listed before the includes that define the same paths.
    path("admin/login/", limit_sign_ins(admin.site.login)),
    path("accounts/login/", limit_sign_ins(auth_views.LoginView.as_view()), name="login"),
    path("accounts/password_reset/", PasswordResetView.as_view(), name="password_reset"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("healthz", ops_views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("metrics", metrics_view.metrics, name="metrics"),
    path("", include(("hoa.staff_urls", "hoa"), namespace="hoa")),
    path("orgs/<slug:org_slug>/charges/", include("charges.urls")),
    path("orgs/<slug:org_slug>/", include("hoa.complaints.urls")),
    path("orgs/<slug:org_slug>/", include("vendors.urls")),
]

handler400 = "hoa.web.views.bad_request"
handler403 = "hoa.web.views.permission_denied"
handler404 = "hoa.web.views.page_not_found"
handler500 = "hoa.web.views.server_error"
