"""Django's ``makemigrations``, with ``locking.E013`` reported as the warning
``locking.W013`` while it runs: a new ``FencedModel`` has no guard until the migration this
command writes (``makemigrations --empty yourapp``, then ``InstallFenceGuard``) exists, and
Django runs the system checks before the command. ``check`` and ``migrate`` still report
E013 as an error.

An app listed before ``locking`` in ``INSTALLED_APPS`` that overrides ``makemigrations`` too
wins (Django takes the first); subclass this command there, or pass ``--skip-checks``.
"""

from django.core.management.commands.makemigrations import Command as MakeMigrations

from locking.fenced_checks import writing_migrations


class Command(MakeMigrations):
    def check(self, *args, **kwargs) -> None:
        with writing_migrations():
            super().check(*args, **kwargs)
