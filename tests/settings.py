"""The settings of the test run: the project's, plus the models of locking's own tests.

pytest uses them (pyproject.toml); ``manage.py`` and the servers never do, so the test app
needs no migration in the project's own settings.
"""

from hoa.settings import *  # noqa: F403
from hoa.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "locking.tests.testapp"]
# locking's tests also move the fence to a second alias on the same server (LOCK_DATABASE).
_test_name = (
    DATABASES["default"].get("TEST", {}).get("NAME") or f"test_{DATABASES['default']['NAME']}"
)
DATABASES = {
    **DATABASES,
    "second": {**DATABASES["default"], "TEST": {"NAME": f"{_test_name}_second"}},
}
