"""Take docs/locking/quickstart.md as a new adopter takes it: a fresh virtualenv, the built
wheel installed from its file, a fresh Django project, an app with a ``FencedModel``, its
migrations (``makemigrations``, then ``makemigrations --empty`` filled with
``InstallFenceGuard``), ``migrate``, ``check``, and a first fenced write with ``run_fenced``
and with a lease and ``advance_fence``. Every command runs in order, with the page's
placeholders filled (``yourapp``, ``mysite``, the settings), and must exit 0; each is timed.

    python scripts/locking_quickstart.py dist/django_fenced_writes-3.0.0-py3-none-any.whl \
        --python 3.13 --django "Django>=6.1,<6.2"

``make test-locking-matrix`` runs it on each combination of scripts/locking_matrix.py (the
matrix's own Redis; a database of its own on the worktree's PostgreSQL, dropped after).
Standard library only.
"""

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "docs" / "locking" / "quickstart.md"
# The PostgreSQL driver, as the quick start's install line names it.
PSYCOPG = "psycopg[binary]>=3.2,<4"

# The quick start's settings, filled: appended to the settings.py that startproject wrote.
SETTINGS = """
INSTALLED_APPS += ["locking", "yourapp"]
DATABASES = {{
    "default": {{
        "ENGINE": "django.db.backends.postgresql",
        "NAME": {database!r},
        "USER": "hoa",
        "HOST": "127.0.0.1",
        "PORT": {port!r},
    }}
}}
LOCK_REDIS_URL = {redis_url!r}
"""

# "Give a model a fence" and "Minimal usage": the model, then the service.
MODELS = """from django.db import models

from locking.models import FencedModel


class Invoice(FencedModel):  # adds last_fence_token, the fence of this row
    number = models.CharField(max_length=20, unique=True)
    sent = models.BooleanField(default=False)
"""

GUARD_MIGRATION = """from django.db import migrations

from locking import InstallFenceGuard


class Migration(migrations.Migration):
    dependencies = [("yourapp", "0001_initial")]
    operations = [InstallFenceGuard("invoice")]
"""

SERVICES = """from datetime import timedelta

from django.db import transaction

from locking import Attempt, FenceLock, advance_fence, claim_fence, run_fenced

from yourapp.models import Invoice


def send(invoice_id: int) -> str:
    def work(lease):
        claim_fence(lease)  # committed first: no older holder commits after
        lease.check()  # LeaseLost before anything goes out
        with transaction.atomic():
            advance_fence(Invoice.objects.filter(pk=invoice_id), lease)  # StaleFencingToken
            Invoice.objects.filter(pk=invoice_id, sent=False).update(sent=True)
        return "sent"

    return run_fenced(f"invoice:{invoice_id}", work, ttl=timedelta(seconds=30),
                      attempt=Attempt(actor="billing-cron", operation="send_invoice"))


def send_with_the_pieces(invoice_id: int) -> None:
    with FenceLock().acquire(f"invoice:{invoice_id}", ttl=timedelta(seconds=30),
                             holder="alice") as lease:
        with transaction.atomic():
            advance_fence(Invoice.objects.filter(pk=invoice_id), lease)
"""

# The first fenced writes, and what they must have left: printed for the check below.
FIRST_WRITE = (
    "from yourapp.models import Invoice; from yourapp.services import send, "
    "send_with_the_pieces; invoice = Invoice.objects.create(number='INV-1'); "
    "print(send(invoice.pk)); send_with_the_pieces(invoice.pk); invoice.refresh_from_db(); "
    "print(invoice.sent, invoice.last_fence_token)"
)


def shown_commands(page: Path) -> list[str]:
    """The ``python manage.py …`` lines of the page's ``sh`` blocks, without comments."""
    commands, in_sh = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_sh = line.strip() == "```sh"
        elif in_sh and line.startswith("python manage.py"):
            commands.append(line.split("#")[0].strip())
    return commands


class QuickstartError(Exception):
    """A step of the quick start failed; the message is the one line to print."""


def run_quickstart(
    *, python: Path, wheel: Path, django: str, pg_port: str, redis_url: str, database: str
) -> list[tuple[str, float]]:
    """Every command of the quick start in a fresh project, in order; ``(command, seconds)``
    each. Raises QuickstartError at the first that exits non-zero or says the wrong thing."""
    timed: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="locking-quickstart-") as tmp:
        home = Path(tmp)
        venv = home / "venv"
        bin_ = venv / "bin"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE")
        }
        env["PATH"] = f"{bin_}{os.pathsep}{env.get('PATH', '')}"

        def step(command: list[str], *, shown: str | None = None) -> str:
            started = time.monotonic()
            result = subprocess.run(
                command, cwd=home, env=env, capture_output=True, text=True, check=False
            )
            seconds = time.monotonic() - started
            shown = shown or shlex.join(command).replace(str(home) + "/", "")
            timed.append((shown, seconds))
            if result.returncode != 0:
                sys.stdout.write((result.stdout + result.stderr)[-5000:])
                raise QuickstartError(f"quick start: `{shown}` exited {result.returncode}")
            return result.stdout

        def write(path: str, text: str, *, append: bool = False) -> None:
            with (home / path).open("a" if append else "w") as file:
                file.write(text)

        step([str(python), "-m", "venv", str(venv)], shown="python -m venv venv")
        step(
            [str(bin_ / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             str(wheel.resolve()), PSYCOPG, django],
            shown=f'pip install {wheel.name} "{PSYCOPG}" "{django}"',
        )  # fmt: skip
        python_ = str(bin_ / "python")
        step([str(bin_ / "django-admin"), "startproject", "mysite", "."],
             shown="django-admin startproject mysite .")  # fmt: skip

        def manage(*args: str, shown: str = "") -> str:
            command = shlex.join(["python", "manage.py", *args])
            return step([python_, "manage.py", *args], shown=shown or command)

        manage("startapp", "yourapp")
        write(
            "mysite/settings.py",
            SETTINGS.format(database=database, port=pg_port, redis_url=redis_url),
            append=True,
        )
        manage("migrate", "locking")
        manage("check")
        write("yourapp/models.py", MODELS)
        manage("makemigrations", "yourapp")
        manage("makemigrations", "--empty", "yourapp", "--name", "invoice_fence_guard")
        guard = home / "yourapp" / "migrations" / "0002_invoice_fence_guard.py"
        if not guard.is_file():
            raise QuickstartError(f"quick start: makemigrations --empty wrote no {guard.name}")
        write(str(guard.relative_to(home)), GUARD_MIGRATION)
        manage("migrate")
        manage("check")
        manage("check", "--database", "default")
        write("yourapp/services.py", SERVICES)
        said = manage(
            "shell", "-c", FIRST_WRITE, shown="python manage.py shell -c '<the first fenced write>'"
        ).split()[-3:]  # Django 6: "N objects imported"
        # run_fenced's write, then the lease's: the row holds the second grant's token.
        if len(said) != 3 or said[:2] != ["sent", "True"] or not int(said[2]) >= 2:
            raise QuickstartError(f"quick start: the first fenced write said {said}")
    ran = {command for command, _ in timed}
    missing = [command for command in shown_commands(QUICKSTART) if command not in ran]
    if missing:
        raise QuickstartError(f"quick start: {QUICKSTART.name} shows commands not run: {missing}")
    return timed


def create_database(pg_port: str, database: str, *, drop: bool = False) -> None:
    """(Re)create or drop ``database`` on the worktree's PostgreSQL (its ``hoa`` role)."""
    statements = [f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)']
    if not drop:
        statements.append(f'CREATE DATABASE "{database}"')
    psql = ["psql", "-h", "127.0.0.1", "-p", pg_port, "-U", "hoa", "-d", "hoa", "-qc"]
    for statement in statements:
        for attempt in range(DROP_ATTEMPTS):
            result = subprocess.run([*psql, statement], capture_output=True, text=True, check=False)
            # An autovacuum worker on the database just used is the server's own: the hoa
            # role may not terminate it (FORCE refuses), and it leaves within moments.
            if result.returncode == 0 or not any(w in result.stderr for w in STILL_IN_USE):
                break
            time.sleep(0.5 * (attempt + 1))
        if result.returncode != 0:
            raise QuickstartError(f"quick start: {statement}: {result.stderr.strip()}")


DROP_ATTEMPTS = 8
STILL_IN_USE = ("must be a member of the role whose process", "is being accessed by other users")


def report(name: str, timed: list[tuple[str, float]]) -> list[str]:
    """The timed steps, one line each, and the total."""
    lines = [f"{name}: {seconds:6.1f} s  {command}" for command, seconds in timed]
    lines.append(f"{name}: {sum(s for _, s in timed):6.1f} s  total ({len(timed)} commands)")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--python", default=sys.executable, help="an interpreter path")
    parser.add_argument("--django", default="Django>=6.1,<6.2")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/3")
    parser.add_argument("--pg-port", default=os.environ.get("HOA_PG_PORT", "55432"))
    parser.add_argument("--database", default="locking_quickstart")
    args = parser.parse_args(argv)
    try:
        create_database(args.pg_port, args.database)
        try:
            timed = run_quickstart(
                python=Path(args.python), wheel=args.wheel, django=args.django,
                pg_port=args.pg_port, redis_url=args.redis_url, database=args.database,
            )  # fmt: skip
        finally:
            create_database(args.pg_port, args.database, drop=True)
    except QuickstartError as error:
        print(error, file=sys.stderr)
        return 1
    print("\n".join(report("quick start", timed)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
