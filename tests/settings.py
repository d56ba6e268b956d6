"""The settings of the test run: the project's, plus apps that exist only for tests.

- ``locking.tests.testapp``: the models of locking's own tests;
- ``tests.budgets``: annual budget approval, a third fenced operation that proves the
  frame's registry (docs/architecture.md, "Adding an operation"), with its URLs in the
  test run's root URLconf (``tests/urls.py``);
- a webhook signing secret, which the stand-ins of the external services verify.

pytest uses them (pyproject.toml), and so do the ``manage.py`` children it starts (they
inherit ``DJANGO_SETTINGS_MODULE``); ``manage.py`` run by hand and the servers never do, so
the test apps need no migration in the project's own settings.

Under pytest-xdist (``make test``) each worker has its own Redis database, and pytest-django
gives it its own test databases (``locking/tests/workers.py``, docs/testing.md).
"""

from locking.tests.workers import isolate_redis_databases

isolate_redis_databases()  # before hoa.settings reads REDIS_URL and LOCK_REDIS_URL

from hoa.settings import *  # noqa: E402, F403
from hoa.settings import DATABASES, INSTALLED_APPS, WEBHOOK_SIGNING_SECRET  # noqa: E402

INSTALLED_APPS = [*INSTALLED_APPS, "locking.tests.testapp", "tests.budgets"]
ROOT_URLCONF = "tests.urls"
# locking's tests also move the fence to a second alias on the same server (LOCK_DATABASE).
_test_name = (
    DATABASES["default"].get("TEST", {}).get("NAME") or f"test_{DATABASES['default']['NAME']}"
)
DATABASES = {
    **DATABASES,
    "second": {**DATABASES["default"], "TEST": {"NAME": f"{_test_name}_second"}},
}

# The platform signs its calls, and the stand-ins of the billing and dispatch services
# (tests/harness/http.py) verify them with locking's receiver, as real receivers would.
WEBHOOK_SIGNING_SECRET = WEBHOOK_SIGNING_SECRET or "tests-only-webhook-signing-secret"
LOCK_RECEIVER_SECRET = WEBHOOK_SIGNING_SECRET
