"""``manage.py seed_demo``: create what is missing of the demo data, and say what it did.

Idempotent: a second run adds nothing and says "nothing changed". Quiet when unattended
like every cron command (``CronCommand``); ``make run`` passes ``-v 1`` so the logins are
printed. A bad argument is one line and exit 1.
"""

from django.utils.translation import ngettext

from hoa.demo import seed_demo
from hoa.management.base import ServiceCommand, require_services


class Command(ServiceCommand):
    help = (
        "Create what is missing of the demo associations, staff, complaints and each fenced "
        "operation's demo data (idempotent: a second run changes nothing), then print the "
        "logins."
    )

    def handle(self, *args, **options):
        require_services()  # an operation's demo may run its fenced service: Redis too
        result = seed_demo()
        if options["verbosity"] < 1:
            return
        if result.changed:
            line = ngettext(
                "Demo data ready: %(count)d row added.",
                "Demo data ready: %(count)d rows added.",
                result.created,
            ) % {"count": result.created}
            if result.passwords_reset:
                line += " " + ngettext(
                    "%(count)d demo password set back.",
                    "%(count)d demo passwords set back.",
                    result.passwords_reset,
                ) % {"count": result.passwords_reset}
            self.stdout.write(self.style.SUCCESS(line))
        else:
            self.stdout.write("Demo data already in place: nothing changed.")
        self.stdout.write("Logins:")
        for login in result.logins:
            self.stdout.write(f"  {login.username:<8} / {login.password}   ({login.role})")
