"""The shape of ``locking``'s commands: a bad argument is one line (``OneLineCommand``,
``locks``), and a cron command is quiet on success too (``QuietCommand``,
``prune_fence_events``).

Unattended (stdout not a terminal, as under cron or a systemd timer) and without ``-v``, a
command runs at verbosity 0: it prints nothing when it succeeds, since cron mails whatever
a job prints, and only its one error line when it fails. ``-v 1`` asks for the summary
line, ``-v 2`` for more. On a terminal the default is Django's 1; ``call_command`` keeps 1.
A bad argument is one line, ``CommandError: …``, and exit 1, not argparse's usage and 2.

The project built on ``locking`` has the same rule for its own commands; ``locking``
imports nothing of it, so the few lines are its own.
"""

import sys

from django.core.management.base import BaseCommand, CommandError

VERBOSITY_HELP = (
    "0 prints nothing on success, 1 a summary line, 2 more detail. Default: 1 on a "
    "terminal; 0 when stdout is not a terminal (cron), unless -v is given."
)


def asks_verbosity(arguments: list[str]) -> bool:
    """Whether the command line gives ``-v``/``--verbosity`` explicitly."""
    return any(arg == "-v" or arg.startswith(("-v", "--verbosity")) for arg in arguments)


class OneLineCommand(BaseCommand):
    """A command whose bad argument is one line, ``CommandError: …``, and exit 1."""

    def run_from_argv(self, argv):
        parser = self.create_parser(argv[0], argv[1])
        parser.called_from_command_line = False  # its error() raises CommandError
        try:
            parser.parse_args(argv[2:])
        except CommandError as exc:
            self.stderr.write(f"CommandError: {str(exc).removeprefix('Error: ')}")
            sys.exit(1)
        super().run_from_argv(argv)


class QuietCommand(OneLineCommand):
    """A command cron runs: quiet on success unless asked, one line for a bad argument."""

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        for action in parser._actions:
            if action.dest == "verbosity":
                action.help = VERBOSITY_HELP
        return parser

    def run_from_argv(self, argv):
        if not sys.stdout.isatty() and not asks_verbosity(argv[2:]):
            argv = [*argv, "--verbosity", "0"]
        super().run_from_argv(argv)
