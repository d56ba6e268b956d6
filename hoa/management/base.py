"""Helpers for management commands: who runs them, and one clear line when a service is down."""

import getpass
import os
import re
import sys
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, InterfaceError, connection
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from redis.exceptions import RedisError

from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.answers.table import EXIT_TEMPFAIL
from hoa.batch import Batch, ItemOutcome
from hoa.ops.readiness import pending_migrations
from hoa.security.audit import shown

__all__ = [
    "EXIT_TEMPFAIL",
    "BatchCommand",
    "CronCommand",
    "OperationCommand",
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


# An id given on the command line: a positive bigint, ASCII digits ([0-9]: \d takes other
# scripts' digits too), parsed from text so that a bad one is one line, not argparse's usage.
_ID = re.compile(r"[0-9]{1,19}")


def parse_id(option: str, raw: str | None) -> int:
    """The id ``raw`` given as ``option`` (``--invoice``), or one line of ``CommandError``."""
    if raw is None:
        raise CommandError(f"{option} ID is required.")
    value = raw.strip()
    if not _ID.fullmatch(value) or not 0 < int(value) < 2**63:
        raise CommandError(f"{option} must be a positive whole number, got {shown(raw)!r}.")
    return int(value)


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


# Django's own options, every command's: not the command's to parse.
BASE_OPTIONS = {
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
    *BaseCommand.base_stealth_options,  # call_command's stdout and stderr
}


class OperationCommand(ServiceCommand):
    """A cron command of one fenced operation: parse, check the services, act as
    ``--actor`` (``add_actor_argument``), run, answer through the answer table.

    A subclass declares its arguments (``add_arguments``: call ``super()`` for
    ``--actor``), parses its own options (``parse``: a ``Refusal`` raised there is bad
    input), and ``run(user, via, **parsed)``: the operation's result (its line at ``-v 1``,
    ``str(result)``), a ``hoa.batch.Batch`` (``BatchCommand``), or a ``Refusal`` raised (its
    one line and exit code). ``self.verbosity`` is set before ``run``.
    """

    def add_arguments(self, parser):
        add_actor_argument(parser)

    def parse(self, **options) -> dict:
        """The command's own options, checked (``CommandError`` or a ``Refusal``)."""
        return options

    def parsed(self, **options) -> dict:
        """``parse``, and what the frame's own options add (``BatchCommand``: ``--wait``)."""
        return self.parse(**options)

    def run(self, user, via: str, **parsed):
        raise NotImplementedError

    def handle(self, *args, actor, verbosity, **options):
        own = {name: value for name, value in options.items() if name not in BASE_OPTIONS}
        try:
            parsed = self.parsed(**own)
        except Refusal as exc:
            raise answer_table.command_error(exc) from exc
        self.verbosity = verbosity
        require_services()
        user, via = active_user(actor), f"cli:{os_user()}"
        try:
            result = self.run(user, via, **parsed)
        except Refusal as exc:
            raise answer_table.command_error(exc) from exc
        self.answer(result)

    def answer(self, result) -> None:
        if self.verbosity >= 1:
            self.stdout.write(str(result))


class BatchCommand(OperationCommand):
    """A cron command whose ``--all-orgs`` (or ``--org``) is a batch (``hoa.batch``): one
    item, one association's or every association's, shared with other cron hosts running it
    at the same time (up to ``--wait`` seconds for the items another host holds).

    A subclass declares ``operation`` (its lease's lifetime: ``--wait``'s default is three
    times it), ``items`` (what ``--wait`` waits for, for its help) and ``batch_targets``
    (which targets are a batch, for its help), adds its own arguments (``target``: the
    group ``--org`` and ``--all-orgs`` are in), and returns from ``run(user, via, org=,
    all_orgs=, ...)`` either one item's result or the ``Batch`` of a service run with
    ``self.wait`` and ``on_outcome=self.show``.

    A batch's lines: an item that failed on stderr; at ``-v 2`` every other one on stdout
    (those held elsewhere too if ``held_lines``); at ``-v 1`` the summary. It exits through
    the answer table: 0 done, 75 some still held elsewhere at the deadline, 1 some failed or
    the lock service down (its line only, no summary).
    """

    operation = None  # hoa.operations.FencedOperation
    items = ""
    batch_targets = "--all-orgs"
    held_lines = False

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        self.add_own_arguments(parser, target)
        target.add_argument("--org", metavar="SLUG", help="the association's slug")
        target.add_argument(
            "--all-orgs",
            action="store_true",
            help="every association (those of --actor if given)",
        )
        parser.add_argument(
            "--wait",
            type=float,
            metavar="SECONDS",
            help=f"with {self.batch_targets}: how long to wait for the {self.items} another "
            f"host holds (default: three times the lease TTL, {self.operation.ttl_setting})",
        )
        super().add_arguments(parser)

    def add_own_arguments(self, parser, target) -> None:
        """The command's own arguments; ``target``: the group ``--org`` and ``--all-orgs``
        follow in."""

    def parsed(self, *, wait, **options) -> dict:
        """The command's own options, then ``--wait`` (``self.wait``)."""
        parsed = self.parse(**options)
        if wait is None:
            wait = 3 * self.operation.lease_ttl.total_seconds()
        elif wait < 0:
            raise CommandError(_("--wait must not be negative."))
        self.wait = timedelta(seconds=wait)
        return parsed

    def run(self, user, via: str, **parsed):
        raise NotImplementedError  # parsed: org, all_orgs and the command's own

    def answer(self, result) -> None:
        if not isinstance(result, Batch):
            super().answer(result)
            return
        if result.unavailable:
            raise CommandError(result.message)
        if self.verbosity >= 1:
            self.stdout.write(result.summary)
        if result.exit_code:
            raise CommandError(result.message, returncode=result.exit_code)

    def show(self, outcome: ItemOutcome, batch: Batch) -> None:
        """An item's line as it comes (``on_outcome``)."""
        line = f"{outcome.name}: {outcome.message}"
        if outcome.failed:
            self.stderr.write(line)
        elif self.verbosity >= 2 and (self.held_lines or not outcome.held_elsewhere):
            self.stdout.write(line)
