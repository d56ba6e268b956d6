from django.apps import AppConfig


class LockingConfig(AppConfig):
    name = "locking"
    verbose_name = "Locking"

    def ready(self):
        from locking import checks  # noqa: F401 - registers the system checks
