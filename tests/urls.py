"""The test run's root URLconf: the project's, plus the apps only the test settings install.

Adding an operation touches the root URLconf: here, without editing ``hoa/urls.py``. The
project's error handlers stay the site's.
"""

from django.urls import include, path

from hoa.urls import handler400, handler403, handler404, handler500  # noqa: F401
from hoa.urls import urlpatterns as project_urlpatterns

urlpatterns = [
    *project_urlpatterns,
    path("orgs/<slug:org_slug>/budgets/", include("tests.budgets.urls")),
]
