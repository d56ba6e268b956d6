"""Helpers for management commands: who runs them, and one clear line when a service is down."""

import getpass
import os
import sys

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, InterfaceError, connection
from django.utils.translation import ngettext
from redis.exceptions import RedisError

from hoa.answers.table import EXIT_TEMPFAIL
from hoa.ops.readiness import pending_migrations
from hoa.security.audit import shown

__all__ = [
    "EXIT_TEMPFAIL",
    "CronCommand",
    "ServiceCommand",
    "active_user",
    "add_actor_argument",
    "os_user",
    "require_services",
]


def os_user() -> str:
    """The shell's login name, recorded as ``cli:<name>`` with a command's attempts."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        return f"uid{os.getuid()}"


def add_actor_argument(parser) -> None:
    """``--actor USERNAME``: run as this staff user, checked like the web."""
    parser.add_argument(
        "--actor",
        metavar="USERNAME",
        default="",
        help="act as this staff user, checked like the web and recorded in the audit "
        "(default: the shell's operator)",
    )


def active_user(username: str | None):
    """The active user named by ``--actor``, or ``None`` without one (the operator at the
    shell). Which associations and rows they reach is the resolver's answer
    (``hoa.tenancy``: ``--org``, ``--all-orgs`` and ids go through it); whether they may
    act is the operation's check, made like the web's."""
    if not username:
        return None
    user = get_user_model()._default_manager.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(f'No active user "{shown(username, limit=150)}".')
    return user


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (psycopg's run over several lines)."""
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]


def require_services(*, database: bool = True, redis: bool = True) -> None:
    """Raise ``CommandError`` naming the service that is unreachable."""
    if database:
        try:
            connection.ensure_connection()
        except DatabaseError as exc:
            raise CommandError(
                f"PostgreSQL is unreachable ({settings.DATABASES['default'].get('HOST')}:"
                f"{settings.DATABASES['default'].get('PORT')}): {first_line(exc)}"
            ) from exc
        try:
            pending = pending_migrations()
        except DatabaseError as exc:
            raise CommandError(f"PostgreSQL error: {first_line(exc)}") from exc
        if pending:
            raise CommandError(
                ngettext(
                    "The database is missing %(count)d migration of this code: "
                    "run `python manage.py migrate` first.",
                    "The database is missing %(count)d migrations of this code: "
                    "run `python manage.py migrate` first.",
                    pending,
                )
                % {"count": pending}
            )
    if redis:
        from locking import FenceLock, LockUnavailable

        try:
            FenceLock().client.ping()
        except (RedisError, LockUnavailable) as exc:
            raise CommandError(f"Redis is unreachable ({settings.LOCK_REDIS_URL}): {exc}") from exc


VERBOSITY_HELP = (
    "0 prints nothing on success, 1 a summary line, 2 a line per item. Default: 1 on a "
    "terminal; 0 when stdout is not a terminal (cron), unless -v is given."
)


class CronCommand(BaseCommand):
    """A command cron runs: quiet on success, one line on failure, bad arguments included.

    From the command line with no ``-v``, the verbosity is 1 on a terminal and 0 otherwise,
    so a cron job prints nothing when it succeeds (``-v 1`` asks for its summary line) and
    only the line saying why when it fails. ``call_command`` keeps Django's default of 1.

    Django parses the arguments outside its ``CommandError`` handling (argparse prints its
    usage and exits 2); here a bad argument is ``CommandError: <one line>`` and exit 1,
    like every other bad input. ``--help`` says the verbosity rule. (``locking``'s
    ``prune_fence_events`` follows the same rule with its own few lines.)
    """

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        for action in parser._actions:
            if action.dest == "verbosity":
                action.help = VERBOSITY_HELP
        return parser

    def run_from_argv(self, argv):
        parser = self.create_parser(argv[0], argv[1])
        parser.called_from_command_line = False  # its error() raises CommandError
        try:
            parser.parse_args(argv[2:])
        except CommandError as exc:
            message = str(exc).removeprefix("Error: ")
            self.stderr.write(f"CommandError: {message}")
            sys.exit(1)
        if not sys.stdout.isatty() and not _asks_verbosity(argv[2:]):
            argv = [*argv, "--verbosity", "0"]
        super().run_from_argv(argv)


def _asks_verbosity(arguments: list[str]) -> bool:
    return any(arg == "-v" or arg.startswith(("-v", "--verbosity")) for arg in arguments)


class ServiceCommand(CronCommand):
    """A command that answers a database lost mid-run with one line and exit 1.

    ``require_services`` catches a database that is down when the command starts; this
    catches one that goes away later (a restart between the external call and the
    transaction, say). The transaction that failed rolled back, so nothing is half-written
    and running the command again is safe.
    """

    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except (DatabaseError, InterfaceError) as exc:
            raise CommandError(
                f"PostgreSQL error (the failed transaction was rolled back): {first_line(exc)}"
            ) from exc
