"""Generate monthly charges from cron: one organization (``--org``) or all (``--all-orgs``).

Exit codes (ARCHITECTURE.md): 0 generated or already generated; 75 (EX_TEMPFAIL) busy or
superseded by a newer holder, try again later; 1 bad input, Redis down or billing failure.
Failures are one line on stderr, never a traceback.

``--all-orgs`` walks every organization and skips busy ones (reporting them), so several
cron hosts can run it at the same time and share the work; ``--workers N`` spreads the
walk over N processes on this host.
"""

import getpass
import multiprocessing
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import date
from itertools import repeat
from multiprocessing.util import Finalize

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import connections
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from charges.services import (
    GENERATE_PERMISSION,
    OPERATION,
    BillingFailed,
    GenerationBusy,
    GenerationSuperseded,
    InvalidMonth,
    LockServiceUnavailable,
    NotAllowed,
    current_month,
    ensure_may_generate,
    generate_monthly_charges,
    parse_month,
)
from hoa.management.base import EXIT_TEMPFAIL, ServiceCommand, require_services
from hoa.models import Organization
from hoa.security.audit import Reason, record_denial, shown
from locking import Outcome

# What a refused --actor is recorded against (hoa.security.audit.record_denial).
COMMAND_RESOURCE = "command:generate_monthly_charges"
# The words of the --all-orgs summary line, by outcome (stale: a newer holder took over).
SUMMARY = {
    Outcome.COMMITTED: gettext_lazy("generated"),
    Outcome.ALREADY_DONE: gettext_lazy("already generated"),
    Outcome.BUSY: gettext_lazy("busy"),
    Outcome.STALE: gettext_lazy("superseded"),
    Outcome.FAILED: gettext_lazy("failed"),
}


@dataclass(frozen=True)
class OrgOutcome:
    """One organization's answer, small enough to come back from a worker process."""

    slug: str
    kind: Outcome
    message: str


def generate_for(organization: Organization, month: date, actor: str) -> OrgOutcome:
    """Run the service for one organization and classify its answer."""
    try:
        result = generate_monthly_charges(organization=organization, month=month, actor=actor)
    except (GenerationBusy, GenerationSuperseded, BillingFailed, LockServiceUnavailable) as exc:
        return OrgOutcome(organization.slug, exc.outcome, str(exc))
    return OrgOutcome(organization.slug, result.outcome, result.message)


def _start_worker() -> None:
    # Forked from a parent that closed its connections: each worker opens its own and
    # closes it when the pool shuts the worker down.
    Finalize(None, connections.close_all, exitpriority=10)


def os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        return f"uid {os.getuid()}"


class Command(ServiceCommand):
    help = (
        "Generate the monthly charges of one organization (--org SLUG) or of every "
        "organization (--all-orgs), exactly once. Exit 0 done or already done, 75 busy or "
        "superseded (try again later), 1 bad input, Redis down or billing failure."
    )

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--org", metavar="SLUG", help="the organization's slug")
        target.add_argument(
            "--all-orgs",
            action="store_true",
            help="every organization (those of --actor if given); busy ones are skipped",
        )
        parser.add_argument(
            "--month", metavar="YYYY-MM", help="the month to bill (default: the current month)"
        )
        parser.add_argument(
            "--actor",
            metavar="USERNAME",
            help="the staff user on whose behalf this runs (recorded in the audit)",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            metavar="N",
            help="with --all-orgs: process organizations in N processes (default 1)",
        )

    def handle(self, *args, org, all_orgs, month, actor, workers, **options):
        month = self._month(month)
        if workers < 1:
            raise CommandError(_("--workers must be at least 1."))
        if workers > 1 and not all_orgs:
            raise CommandError(_("--workers only applies to --all-orgs."))
        require_services()
        user = self._user(actor)
        who = f"{user.get_username()} (os user {os_user()})" if user else f"os user {os_user()}"
        label = f"{who} via generate_monthly_charges"
        if org:
            self._one(org, month, user, label)
        else:
            self._all(month, user, label, workers)

    # -- input -------------------------------------------------------------------------------

    def _month(self, value: str | None) -> date:
        if value is None:
            return current_month()
        try:
            return parse_month(value)
        except InvalidMonth as exc:
            raise CommandError(str(exc)) from exc

    def _user(self, username: str | None):
        if username is None:
            return None
        user_model = get_user_model()
        try:
            user = user_model._default_manager.get_by_natural_key(username)
        except user_model.DoesNotExist:
            raise CommandError(
                _('Unknown user "%(username)s".') % {"username": shown(username)}
            ) from None
        if not user.is_active or not user.has_perm(GENERATE_PERMISSION):
            record_denial(
                reason=Reason.PERMISSION,
                note=f"inactive or lacks {GENERATE_PERMISSION}",
                resource=COMMAND_RESOURCE,
                actor=f"{username} (os user {os_user()}) via generate_monthly_charges",
                operation=OPERATION,
            )
            raise CommandError(
                _("%(username)s may not generate charges.") % {"username": shown(username)}
            )
        return user

    # -- one organization --------------------------------------------------------------------

    def _one(self, slug: str, month: date, user, label: str) -> None:
        organization = Organization.objects.filter(slug=slug).first()
        if organization is None:
            raise CommandError(_('Unknown organization "%(slug)s".') % {"slug": shown(slug)})
        if user is not None:
            try:
                ensure_may_generate(user, organization)
            except NotAllowed as exc:
                record_denial(
                    reason=Reason.PERMISSION,
                    note=f"not staff of {slug} with {GENERATE_PERMISSION}",
                    resource=COMMAND_RESOURCE,
                    actor=label,
                    organization=organization,
                    operation=OPERATION,
                )
                raise CommandError(str(exc)) from exc
        outcome = generate_for(organization, month, label)
        if outcome.kind in (Outcome.BUSY, Outcome.STALE):
            raise CommandError(outcome.message, returncode=EXIT_TEMPFAIL)
        if outcome.kind in (Outcome.FAILED, Outcome.UNAVAILABLE):
            raise CommandError(outcome.message)
        self.stdout.write(outcome.message)

    # -- every organization ------------------------------------------------------------------

    def _all(self, month: date, user, label: str, workers: int) -> None:
        organizations = Organization.objects.for_user(user) if user else Organization.objects
        organizations = list(organizations.order_by("slug"))
        if workers == 1:
            counts = self._report(generate_for(org, month, label) for org in organizations)
        else:
            # Fork, so the workers start with Django already set up; they must not share
            # the parent's database connection.
            connections.close_all()
            with ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_worker,
            ) as pool:
                try:
                    counts = self._report(
                        pool.map(generate_for, organizations, repeat(month), repeat(label))
                    )
                except CommandError:
                    pool.shutdown(cancel_futures=True)
                    raise
        self.stdout.write(
            _("%(month)s: %(total)d organizations: %(counts)s.")
            % {
                "month": f"{month:%Y-%m}",
                "total": len(organizations),
                "counts": ", ".join(f"{counts[kind]} {label}" for kind, label in SUMMARY.items()),
            }
        )
        if counts[Outcome.FAILED]:
            raise CommandError(
                _("%(count)d organizations could not be billed; see the lines above.")
                % {"count": counts[Outcome.FAILED]}
            )
        if counts[Outcome.BUSY] or counts[Outcome.STALE]:
            raise CommandError(
                _("%(count)d organizations were busy or superseded; run again later to confirm.")
                % {"count": counts[Outcome.BUSY] + counts[Outcome.STALE]},
                returncode=EXIT_TEMPFAIL,
            )

    def _report(self, outcomes) -> Counter:
        """Print each outcome as it arrives; stop at once if Redis is down."""
        counts: Counter = Counter()
        for outcome in outcomes:
            if outcome.kind == Outcome.UNAVAILABLE:
                raise CommandError(outcome.message)
            counts[outcome.kind] += 1
            stream = (
                self.stdout
                if outcome.kind in (Outcome.COMMITTED, Outcome.ALREADY_DONE)
                else self.stderr
            )
            stream.write(f"{outcome.slug}: {outcome.message}")
        return counts
