"""What charge generation raises on purpose. Nothing was written in any of these cases.

Each says which kind of answer it is (``hoa.web.answer_table``) and, when it answers a fenced
attempt, the ``outcome`` ``run_fenced`` records. ``str(exc)`` is the sentence a person
reads (``charges.answers``).
"""

from datetime import date

from django.utils.translation import gettext_lazy as _

from charges import answers
from hoa.models import Organization
from hoa.web.answer_table import Answer, Refusal
from locking import LockHeld, Outcome, StaleFencingToken


class ChargesError(Refusal):
    """Base class of everything charge generation raises on purpose."""


class InvalidMonth(ChargesError, ValueError):
    """The month is not a ``YYYY-MM`` month (or not the first day of one)."""

    answer = Answer.BAD_REQUEST
    title = _("Not a month")

    def __init__(self, value: object, why: str = "format"):
        self.value = value
        super().__init__(answers.not_a_month(value, why))


class NotAllowed(ChargesError):
    """The actor is not staff of the organization or lacks the permission."""

    answer = Answer.FORBIDDEN
    outcome = Outcome.DENIED  # raised before any lease: recorded as an AccessDenial
    title = _("Not allowed")

    def __init__(self, *, actor: str, organization: Organization):
        self.actor = actor
        self.organization = organization
        super().__init__(answers.not_allowed(actor, organization))


class GenerationBusy(ChargesError):
    """Another holder is generating these charges right now."""

    answer = Answer.RETRY
    outcome = Outcome.BUSY
    title = _("Charges are being generated")

    def __init__(self, *, organization: Organization, month: date, lock: LockHeld):
        self.organization = organization
        self.month = month
        self.busy = lock  # what the 409 page shows: holder, since, until
        self.holder = lock.holder or str(_("another worker"))
        super().__init__(answers.busy(organization, month, self.holder, lock.retry_after))


class GenerationSuperseded(ChargesError):
    """This holder's lease ran out and a newer holder took over."""

    answer = Answer.RETRY
    outcome = Outcome.STALE
    title = _("A newer holder took over")

    def __init__(self, *, organization: Organization, month: date, stale: StaleFencingToken):
        self.organization = organization
        self.month = month
        self.token = stale.token
        self.recorded = stale.recorded
        super().__init__(answers.superseded(organization, month, stale.token, stale.recorded))


class LockServiceUnavailable(ChargesError):
    """Redis could not be reached."""

    answer = Answer.UNAVAILABLE
    outcome = Outcome.UNAVAILABLE
    title = _("Lock service unavailable")

    def __init__(self, *, organization: Organization, month: date, reason: str):
        self.organization = organization
        self.month = month
        self.reason = reason
        super().__init__(answers.lock_service_down(organization, month, reason))


class BillingFailed(ChargesError):
    """The billing webhook refused, failed or timed out."""

    answer = Answer.UPSTREAM_FAILED
    outcome = Outcome.FAILED
    title = _("The billing system failed")

    def __init__(self, *, organization: Organization, month: date, reason: str, status=None):
        self.organization = organization
        self.month = month
        self.reason = reason
        self.status = status
        super().__init__(answers.billing_failed(organization, month, reason))
