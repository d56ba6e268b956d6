"""The settings of the test run: the project's, plus the models of locking's own tests.

pytest uses them (pyproject.toml); ``manage.py`` and the servers never do, so the test app
needs no migration in the project's own settings.
"""

from hoa.settings import *  # noqa: F403
from hoa.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "locking.tests.testapp"]
