"""The README's set-up text works as written with other ports (issue 37, item 6).

``make help`` names the port the server will really use, and a ``manage.py`` command run by
hand, as the README writes it, finds the project-local PostgreSQL and Redis on the ports
``HOA_PG_PORT`` and ``HOA_REDIS_PORT`` give, as ``make`` does.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def make_help(**ports: str) -> str:
    # Not the ports of the make that runs the tests either (command-line variables reach
    # a nested make through MAKEFLAGS).
    dropped = ("HOA_", "PORT", "MAIL_PORT", "MAKE", "MFLAGS")
    env = {key: value for key, value in os.environ.items() if not key.startswith(dropped)}
    env.update(ports)
    done = subprocess.run(
        ["make", "--no-print-directory", "help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_make_help_prints_the_real_port():
    listing = make_help(PORT="8123", HOA_PG_PORT="55499", HOA_REDIS_PORT="56499")

    run = next(line for line in listing.splitlines() if line.split()[:1] == ["run"])
    assert "http://127.0.0.1:8123/" in run
    assert "8000" not in listing
    assert "(:55499)" in listing and "(:56499)" in listing
    assert "$(" not in listing  # every placeholder filled in
    assert "http://127.0.0.1:8000/" in make_help()  # and the defaults without any


def test_make_help_lists_every_target_a_person_runs_in_one_column():
    listing = make_help().splitlines()
    names = [line.split()[0] for line in listing]
    assert {"run", "seed", "migrate", "stop", "stop-run", "test-locking-matrix"} <= set(names)
    columns = {len(line) - len(line[2:].split(maxsplit=1)[1]) for line in listing}
    assert len(columns) == 1, listing  # the longest name too
    mail = next(line for line in listing if line.split()[0] == "run")
    assert "mail at :8002" in mail  # make run's mail catcher, on PORT + 2


@pytest.mark.django_db
def test_manage_py_run_by_hand_finds_the_services_on_the_ports_make_was_given():
    """The README's line for running seed_demo by hand, with the ports exported and no
    DATABASE_URL or REDIS_URL: the child connects to this test run's PostgreSQL and Redis
    (on ports of their own, not the defaults) through the settings' defaults."""
    by_hand = "HOA_PG_PORT=55433 HOA_REDIS_PORT=56380 DEBUG=1 .venv/bin/python manage.py seed_demo"
    assert by_hand in README, "the README's by-hand command, with the ports"
    database = settings.DATABASES["default"]
    redis_port = re.search(r":(\d+)/", settings.REDIS_URL)[1]
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "LOCK_REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(DEBUG="1", HOA_PG_PORT=str(database["PORT"]), HOA_REDIS_PORT=redis_port)
    # The same settings and connections seed_demo starts with; it would write the demo
    # into the developer's own database, so the child only connects and says where.
    probe = (
        "import django; django.setup(); "
        "from django.db import connection; from django_redis import get_redis_connection; "
        "connection.ensure_connection(); get_redis_connection().ping(); "
        "print(connection.settings_dict['PORT'], get_redis_connection().connection_pool"
        ".connection_kwargs['port'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "hoa.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(database["PORT"]), redis_port]
