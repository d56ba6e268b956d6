"""Who holds which lease, what was attempted lately, and breaking a stuck lease, from the shell.

    manage.py locks                                  # leases held now, then the latest attempts
    manage.py locks list [PREFIX] [--attempts N]     # only resources that start with PREFIX
    manage.py locks break RESOURCE --token N --reason "worker-7 hangs on the billing call"
    manage.py locks repair RESOURCE --model app.Model --pk PK --token N --reason "old fixture"

One line per item, or JSON Lines with ``--json``; exit 0 done, 75 the lease or row holds
another token now, 1 bad input or a service down. Run as the operator at the shell, who
sees every scope; each break and repair is audited. The documentation's 'Operating it'.
"""

import getpass
import json
import os

from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import DatabaseError
from django.utils.translation import gettext as _

from locking.conf import setting
from locking.epochs import FenceRowChanged, repair_fence_row
from locking.exceptions import LockUnavailable
from locking.keys import validate_resource
from locking.management.quiet import OneLineCommand
from locking.models import FenceEvent
from locking.operators import (
    HolderChanged,
    HolderInfo,
    break_lease,
    broken_message,
    changed_message,
    holders,
    viewer_scopes,
)

LIST, BREAK, REPAIR = "list", "break", "repair"
# EX_TEMPFAIL: the lease (or row) changed since it was listed; look again, decide again.
EXIT_CHANGED = 75
DASH = "-"  # what ``locks list`` prints for a lease without a token
DEFAULT_ATTEMPTS = 20
# SCAN stops after this many leases (leases live while an operation runs).
HOLDER_SCAN_LIMIT = 1000


class Command(OneLineCommand):
    help = (
        "List the leases held now and the latest fenced attempts (locks [list] [PREFIX]), or "
        "break a stuck lease (locks break RESOURCE --token N --reason ...), or set back a "
        "fenced row beyond its record (locks repair RESOURCE --model M --pk PK --token N "
        "--reason ...). Exit 0 done (breaking a lease nobody holds says so), 75 the lease or "
        "row changed since it was shown, 1 bad input or Redis or the database unreachable."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "action",
            nargs="?",
            default=LIST,
            choices=(LIST, BREAK, REPAIR),
            help="default: list",
        )
        parser.add_argument(
            "resource",
            nargs="?",
            default="",
            help="list: only resources whose name starts with this; break, repair: the resource",
        )
        parser.add_argument(
            "--reason", default=None, help="break: why, recorded in the audit (required)"
        )
        parser.add_argument(
            "--model", default=None, help="repair: the fenced row's model, app_label.Model"
        )
        parser.add_argument("--pk", default=None, help="repair: the fenced row's primary key")
        parser.add_argument(
            "--token",
            default=None,
            metavar="N",
            help=(
                "break: the token of the lease to break, as `locks list` printed it "
                f"(required; {DASH!r} for a lease listed without one); repair: the token "
                "the row records now, as locking.E016 named it (required)"
            ),
        )
        # Parsed as text and checked in handle(): bad input is a one-line error, exit 1.
        parser.add_argument(
            "--attempts",
            default=str(DEFAULT_ATTEMPTS),
            metavar="N",
            help=f"list: how many of the latest attempts (default {DEFAULT_ATTEMPTS}, 0: none)",
        )
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="one JSON object per line"
        )

    def handle(
        self, *args, action, resource, reason, token, model, pk, attempts, as_json, **options
    ):
        self.as_json = as_json
        try:
            if action == BREAK:
                self.break_one(resource, reason, token)
            elif action == REPAIR:
                self.repair(resource, model, pk, token, reason)
            else:
                if reason is not None or token is not None:
                    raise CommandError(
                        "--reason and --token go with `locks break` or `locks repair`."
                    )
                self.list(resource, attempt_count(attempts))
        except LockUnavailable as exc:
            raise CommandError(f"Redis is unreachable: {first_line(exc.reason)}") from exc
        except DatabaseError as exc:
            raise CommandError(f"The database is unreachable: {first_line(exc)}") from exc

    def list(self, prefix: str, attempts: int) -> None:
        if prefix:
            checked(prefix)
        # Redis first: when it is down, nothing is printed but the one line saying so.
        leases = holders(prefix=prefix, limit=HOLDER_SCAN_LIMIT)
        events = FenceEvent.objects.using(setting("LOCK_DATABASE"))
        if prefix:
            events = events.filter(resource__startswith=prefix)
        latest = list(events[:attempts]) if attempts else []
        for lease in leases:
            self.say(lease_line(lease), kind="lease", **lease_fields(lease))
        if not leases and not self.as_json:
            self.say(_("No lease is held."))
        for event in latest:
            self.say(attempt_line(event), kind="attempt", **attempt_fields(event))
        if not latest and attempts and not self.as_json:
            self.say(_("No attempt is recorded."))

    def break_one(self, resource: str, reason: str | None, token: str | None) -> None:
        if not resource:
            raise CommandError("locks break needs the RESOURCE whose lease to break.")
        checked(resource)
        if not (reason or "").strip():
            raise CommandError('locks break needs --reason "…": it is recorded in the audit.')
        shown = shown_token(token)
        # The shell sees every scope; the audit row still names the resource's own.
        scope = viewer_scopes(None, [resource]).scope_of(resource)
        try:
            broken = break_lease(
                resource, token=shown, by=f"cli:{os_login()}", reason=reason, scope=scope
            )
        except HolderChanged as changed:
            raise CommandError(changed_message(changed), returncode=EXIT_CHANGED) from None
        if broken is None:
            message = _("Nothing to break: no lease is held on %(resource)s.")
            self.say(message % {"resource": resource}, kind="not_held", resource=resource)
            return
        self.say(broken_message(broken), kind="broken", **lease_fields(broken))

    def repair(self, resource, model_name, pk, token, reason) -> None:
        if not resource:
            raise CommandError("locks repair needs the RESOURCE whose fenced row to repair.")
        checked(resource)
        model = fenced_model(model_name)
        if not pk:
            raise CommandError("locks repair needs --pk, the fenced row's primary key.")
        if not (reason or "").strip():
            raise CommandError('locks repair needs --reason "…": it is recorded in the audit.')
        seen = shown_token(token) if token is not None else None
        if seen is None:
            raise CommandError("locks repair needs --token N, the token the row records now.")
        try:
            repaired = repair_fence_row(
                model, pk, resource=resource, token=seen, by=f"cli:{os_login()}", reason=reason
            )
        except FenceRowChanged as changed:
            message = _("%(row)s records token %(current)s now, not %(token)s: nothing repaired.")
            current = "-" if changed.current is None else changed.current
            line = message % {"row": changed.row, "current": current, "token": changed.token}
            raise CommandError(line, returncode=EXIT_CHANGED) from None
        except ValueError as exc:
            raise CommandError(f"{first_line(exc)}.") from None
        except ValidationError as exc:  # a --pk its model's primary key does not take
            raise CommandError(f"--pk {pk!r}: {' '.join(exc.messages)}") from None
        line = _(
            "Repaired %(row)s of %(resource)s: last_fence_token %(was)s -> %(now)s, the last "
            "token of epoch %(epoch)s."
        ) % {
            "row": repaired.row,
            "resource": repaired.resource,
            "was": repaired.was,
            "now": repaired.now,
            "epoch": repaired.epoch,
        }
        self.say(line, kind="repaired", **vars(repaired))

    def say(self, line: str, **fields) -> None:
        if not self.as_json:
            self.stdout.write(line)
        elif fields:
            self.stdout.write(json.dumps(fields, ensure_ascii=False))


def checked(resource: str) -> str:
    try:
        return validate_resource(resource)
    except ValueError as exc:
        raise CommandError(f"{resource!r} is not a resource name: {exc}.") from None


def fenced_model(name: str | None):
    """``--model``: a model with a ``last_fence_token`` column of its own."""
    if not name:
        raise CommandError("locks repair needs --model app_label.Model, the fenced row's model.")
    try:
        model = apps.get_model(name)
    except (LookupError, ValueError):
        raise CommandError(f"--model {name!r} is not an installed model.") from None
    fields = {field.name for field in model._meta.local_concrete_fields}
    if "last_fence_token" not in fields:
        raise CommandError(f"--model {name!r} has no last_fence_token of its own.")
    return model


def shown_token(raw: str | None) -> int | None:
    """``--token``: the token of the lease to break, ``-`` for one listed without a token."""
    if raw is None:
        raise CommandError(
            "locks break needs --token N, the token `locks list` printed for the lease: "
            "only that lease is broken."
        )
    if raw.strip() == DASH:
        return None
    if not (raw.strip().isascii() and raw.strip().isdigit()):
        raise CommandError(f"--token must be a whole number (or {DASH!r}), got {raw!r}.")
    return int(raw.strip())


def attempt_count(raw: str) -> int:
    try:
        count = int(raw.strip())
    except ValueError:
        count = -1
    if count < 0:
        raise CommandError(f"--attempts must be a whole number of at least 0, got {raw!r}.")
    return count


def first_line(message) -> str:
    return (str(message).strip().splitlines() or ["no reason given"])[0]


def os_login() -> str:
    """The shell's login name, recorded as ``cli:<name>`` with the break."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        return f"uid{os.getuid()}"


def lease_line(lease: HolderInfo) -> str:
    since = f"{lease.acquired_at:%Y-%m-%d %H:%M:%S} UTC" if lease.acquired_at else "?"
    line = _(
        "%(resource)s  token %(token)s  held by %(holder)s since %(since)s, "
        "expires in %(expires_in)s (%(state)s)"
    ) % {
        "resource": lease.resource,
        "token": lease.token if lease.token is not None else "-",
        "holder": lease.label or lease.owner,
        "since": since,
        "expires_in": lease.expires_in,
        "state": lease.state.label,
    }
    return f"lease    {line}"


def lease_fields(lease: HolderInfo) -> dict:
    return {
        "resource": lease.resource,
        "token": lease.token,
        "owner": lease.owner,
        "holder": lease.label,
        "acquired_at": lease.acquired_at.isoformat() if lease.acquired_at else None,
        "expires_in_seconds": round(lease.ttl_left.total_seconds(), 3),
        "expires_in": lease.expires_in,
        "state": str(lease.state),
    }


def attempt_line(event: FenceEvent) -> str:
    line = _("%(at)s UTC  %(outcome)s  %(resource)s  token %(token)s  by %(actor)s%(detail)s") % {
        "at": f"{event.at:%Y-%m-%d %H:%M:%S}",
        "outcome": event.outcome,
        "resource": event.resource,
        "token": event.token if event.token is not None else "-",
        "actor": event.actor or "-",
        "detail": f": {' '.join(event.detail.split())}" if event.detail else "",
    }
    return f"attempt  {line}"


def attempt_fields(event: FenceEvent) -> dict:
    return {
        "at": event.at.isoformat(),
        "resource": event.resource,
        "outcome": str(event.outcome),
        "token": event.token,
        "actor": event.actor,
        "operation": event.operation,
        "scope": event.scope,
        "ip": event.ip,
        "detail": event.detail,
    }
