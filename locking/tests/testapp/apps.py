from django.apps import AppConfig


class LockingTestAppConfig(AppConfig):
    """The models of locking's own tests; installed by test settings only."""

    name = "locking.tests.testapp"
    label = "locking_testapp"
    default_auto_field = "django.db.models.BigAutoField"
