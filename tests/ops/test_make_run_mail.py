"""The emails a newcomer sees (issue 47, item 1): ``make run`` itself, on ports of its own.

``make run`` starts the outbox sender in a loop and a mail catcher beside the server, and
points the links of people's emails at the port it serves. The test runs the real target
against this run's test database and Redis (a clean environment, as a person's shell
would give it), closes a demo complaint on the staff page as alice, finds the reporter's
email in the catcher's page, follows its opt-out link on the served port, and stops it all
with ``make stop-run`` (the same pid files ``make stop`` reads; the shared PostgreSQL and
Redis stay up).
"""

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from django.conf import settings

from hoa.demo import DEMO_PASSWORD
from hoa.models import Complaint, ReporterEmail
from tests.harness.net import LOOPBACK, free_port
from tests.harness.processes import BASE_DIR, django_database_url, stop_process
from tests.harness.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# What a person's shell gives make; not pytest's settings module, nor make test's MAKEFLAGS.
SHELL_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "PYTHON")
PID_FILES = ("server", "mail-sender", "mail-catcher", "payment-standin")


def distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        if (port := free_port()) not in ports:
            ports.append(port)
    return ports


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_make_run_catches_the_reporters_email_with_an_opt_out_link_on_the_served_port(tmp_path):
    web, payment, mail, smtp = distinct_free_ports(4)
    run_dir = tmp_path / "run"
    database = settings.DATABASES["default"]
    make_vars = [
        f"HOA_PG_PORT={database['PORT']}",
        f"HOA_REDIS_PORT={urlsplit(settings.REDIS_URL).port}",
        f"DATABASE_URL={django_database_url()}",
        f"REDIS_URL={settings.REDIS_URL}",
        f"PORT={web}",
        f"PAYMENT_PORT={payment}",
        f"MAIL_PORT={mail}",
        f"SMTP_PORT={smtp}",
        f"RUN_DIR={run_dir}",
        "MAIL_EVERY=0.5",
    ]
    env = {name: os.environ[name] for name in SHELL_ENV if name in os.environ}
    served, catcher = f"http://{LOOPBACK}:{web}", f"http://{LOOPBACK}:{mail}"
    log = tmp_path / "make-run.log"
    with log.open("w") as output:
        make = subprocess.Popen(
            ["make", "--no-print-directory", "run", *make_vars],
            cwd=BASE_DIR,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stopped with its group if the test fails half-way
        )
    try:

        def up() -> bool:
            assert make.poll() is None, f"make run exited:\n{log.read_text()[-3000:]}"
            try:
                return requests.get(f"{served}/healthz", timeout=2).status_code == 200
            except requests.ConnectionError:
                return False

        wait_until(up, what="make run's server", timeout=120, interval=0.3)
        banner = log.read_text()
        assert f"read them at {catcher}/" in banner

        # A demo complaint its reporter hears about, closed on the staff page by alice.
        complaint = Complaint.objects.filter(
            organization__slug="maple-court",
            status=Complaint.Status.RESOLVED,
            reporter_email__gt="",
            reporter_opted_out_at__isnull=True,
        ).order_by("pk")[0]
        staff = requests.Session()
        staff.get(f"{served}/accounts/login/", timeout=10)
        signed_in = staff.post(
            f"{served}/accounts/login/",
            {
                "username": "alice",
                "password": DEMO_PASSWORD,
                "csrfmiddlewaretoken": staff.cookies["csrftoken"],
            },
            allow_redirects=False,
            timeout=10,
        )
        assert signed_in.status_code == 302, signed_in.text[-2000:]
        changed = staff.post(
            f"{served}/orgs/maple-court/complaints/{complaint.pk}/status/",
            {
                "from_status": "resolved",
                "to_status": "closed",
                "note": "The reporter confirmed.",
                "csrfmiddlewaretoken": staff.cookies["csrftoken"],
            },
            headers={"Referer": f"{served}/"},
            allow_redirects=False,
            timeout=10,
        )
        assert changed.status_code == 303, changed.text[-2000:]

        # The loop sends it; the catcher's page lists it and shows it.
        email = ReporterEmail.objects.get(complaint=complaint, kind=ReporterEmail.Kind.CLOSED)

        def sent() -> bool:
            email.refresh_from_db()
            return email.state == ReporterEmail.State.SENT

        wait_until(sent, what="the sender loop to send the email", timeout=30, interval=0.2)
        listing = requests.get(f"{catcher}/", timeout=10).text
        rows = [row for row in listing.split("<tr>") if complaint.reporter_email in row]
        pages = [requests.get(f"{catcher}{href}", timeout=10).text for row in rows
                 for href in re.findall(r'href="(/\d+\.eml)"', row)]  # fmt: skip
        shown = [page for page in pages if email.message_id.strip("<>") in page]
        assert len(shown) == 1, f"{email.message_id} is not on the catcher's page"
        links = set(re.findall(r'href="([^"]*/reporters/opt-out/[^"]+)"', shown[0]))
        assert len(links) == 1, links  # the body's link and List-Unsubscribe are one
        (opt_out,) = links
        assert opt_out.startswith(f"{served}/reporters/opt-out/")

        # The link works on the served port: the page, then the opt-out recorded.
        assert requests.get(opt_out, timeout=10).status_code == 200
        complaint.refresh_from_db()
        assert complaint.reporter_opted_out_at is None  # a GET changes nothing
        assert requests.post(opt_out, timeout=10).status_code == 200
        complaint.refresh_from_db()
        assert complaint.reporter_opted_out_at is not None

        # The emails went to the catcher, not to make run's terminal.
        assert "To stop the emails about this complaint" not in log.read_text()

        # make stop-run stops the server and everything beside it, by their pid files.
        pids = {name: int((run_dir / f"{name}.pid").read_text()) for name in PID_FILES}
        subprocess.run(
            ["make", "--no-print-directory", "stop-run", *make_vars],
            cwd=BASE_DIR,
            env=env,
            check=True,
            timeout=60,
        )
        make.wait(timeout=20)
        assert not [name for name, pid in pids.items() if alive(pid)]
        assert not list(run_dir.glob("*.pid"))
    finally:
        stop_process(make, group=True)
