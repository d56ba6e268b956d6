from django.core.management.base import BaseCommand

from hoa.demo import seed_demo
from hoa.management.base import require_services


class Command(BaseCommand):
    help = (
        "Create or refresh the demo organizations, staff, complaints and each fenced "
        "operation's demo data (idempotent)."
    )

    def handle(self, *args, **options):
        require_services(redis=False)
        logins = seed_demo()
        self.stdout.write(self.style.SUCCESS("Demo data ready. Logins:"))
        for login in logins:
            self.stdout.write(f"  {login.username:<8} / {login.password}   ({login.role})")
