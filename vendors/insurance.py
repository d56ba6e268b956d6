"""Vendors held to their insurance: the rule, what lapses soon, and the daily job.

A vendor is insured with an association through the latest certificate of its contracts
there, until that day is past in the association's time zone; an uninsured vendor is neither
assigned nor paid (``VendorNotInsured``). ``record_certificate`` is a compare-and-swap on the
expiry the person saw; ``record_lapses`` (daily, an advisory lock) records each lapse once.
docs/staff-guide.md, "Insurance".
"""

import logging
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from hoa.answers.table import Answer
from hoa.models import Organization
from hoa.security.audit import Reason, record_denial
from locking.advisory import advisory_lock
from vendors import answers
from vendors.exceptions import (
    CertificateChanged,
    CertificateNotAllowed,
    CertificateOutOfRange,
    VendorNotInsured,
)
from vendors.models import (
    CertificateRecorded,
    InsuranceLapse,
    Invoice,
    InvoiceEvent,
    Vendor,
    VendorContract,
)

logger = logging.getLogger(__name__)

# How far ahead the vendors page warns of certificates that lapse.
LAPSING_WITHIN = timedelta(days=30)
LAPSES_LOCK = "vendors:insurance-lapses"
SYSTEM = "system"
RECORD_CERTIFICATE_PERMISSION = "vendors.record_insurance"
# How far from today a certificate's expiry may be (ten years either way): wider than any
# real certificate, narrow enough that 1900-01-01 or 9999-12-31 is caught as the typo it is.
CERTIFICATE_SPAN = timedelta(days=10 * 366)


def check_insured(vendor: Vendor, organization: Organization, day: date, contracts=None) -> None:
    """Raise ``VendorNotInsured`` unless ``vendor``'s latest certificate with
    ``organization`` is valid on ``day`` (the association's today); ``contracts``: the
    vendor's contracts with it, if already read."""
    insured_until = vendor.insured_until(organization, contracts)
    if insured_until is None or insured_until < day:
        raise VendorNotInsured(
            vendor=vendor, organization=organization, day=day, insured_until=insured_until
        )


def today_of(organization: Organization) -> date:
    """The association's today, in its own time zone."""
    return timezone.localdate(timezone=organization.zone)


def lapsing(organization: Organization, *, today: date, within: timedelta = LAPSING_WITHIN):
    """The association's vendors whose certificate lapses within ``within`` of ``today``
    or has lapsed, or who have none on file: rows of ``vendor_id``, ``vendor__name``,
    ``insured_until``, soonest first."""
    return VendorContract.objects.insurance_lapsing(organization, today=today, within=within)


@dataclass(frozen=True)
class CertificateChange:
    """What recording a certificate did: its line of the contract's insurance history."""

    record: CertificateRecorded

    @property
    def answer(self) -> Answer:
        return Answer.DONE

    @property
    def message(self) -> str:
        return answers.certificate_message(self.record)

    def __str__(self) -> str:
        return self.message


def record_certificate(
    *, contract: VendorContract, expires_on: date, seen: date | None, actor
) -> CertificateChange:
    """Record ``expires_on``, the expiry on the vendor's new certificate, on ``contract``,
    as ``actor``, who saw its expiry as ``seen`` (``None``: none on file). Raises
    ``CertificateNotAllowed``, ``CertificateOutOfRange``, or ``CertificateChanged`` when
    the expiry is no longer ``seen``; nothing is written then."""
    organization = contract.organization
    if not (organization.has_staff(actor) and actor.has_perm(RECORD_CERTIFICATE_PERMISSION)):
        record_denial(
            reason=Reason.PERMISSION,
            note=f"record insurance: not staff of {organization.slug} with "
            f"{RECORD_CERTIFICATE_PERMISSION}",
            resource=f"insurance:{organization.slug}",
            actor=actor.get_username(),
            organization=organization,
        )
        raise CertificateNotAllowed(actor=actor.get_username(), organization=organization)
    today = today_of(organization)
    earliest, latest = today - CERTIFICATE_SPAN, today + CERTIFICATE_SPAN
    if not earliest <= expires_on <= latest:
        raise CertificateOutOfRange(earliest=earliest, latest=latest)
    shown = Q(insurance_expires_on__isnull=True) if seen is None else Q(insurance_expires_on=seen)
    with transaction.atomic():
        rows = VendorContract.objects.filter(pk=contract.pk, organization=organization)
        # The compare-and-swap: one conditional UPDATE, its row lock held to the commit.
        if not rows.filter(shown).update(insurance_expires_on=expires_on):
            raise CertificateChanged(current=rows.select_related("vendor").get(), seen=seen)
        record = CertificateRecorded.objects.create(
            contract=contract,
            organization=organization,
            expires_before=seen,
            expires_on=expires_on,
            actor=actor,
            actor_label=actor.get_username(),
        )
    logger.info(
        "insurance certificate recorded",
        extra={"contract": contract.pk, "organization": organization.pk, "actor": actor.pk},
    )
    return CertificateChange(record)


@dataclass(frozen=True)
class LapseResult:
    acquired: bool
    lapses: int = 0
    invoice_events: int = 0

    @property
    def skipped(self) -> bool:
        return not self.acquired


def record_lapses(*, now: datetime | None = None, wait: timedelta | None = None) -> LapseResult:
    """Record every certificate that has lapsed and is not recorded yet, once, with a
    line on the timeline of each invoice its association still owes the vendor."""
    if transaction.get_connection().in_atomic_block:
        raise transaction.TransactionManagementError(
            "record_lapses commits its own pass; do not call it inside transaction.atomic()."
        )
    now = now or timezone.now()
    with transaction.atomic(), advisory_lock(LAPSES_LOCK, wait=wait) as acquired:
        if not acquired:
            logger.debug(
                "insurance lapses skipped: another pass is running",
                extra={"resource": LAPSES_LOCK, "outcome": "skipped"},
            )
            return LapseResult(acquired=False)
        lapses = _new_lapses(now)
        InsuranceLapse.objects.bulk_create(lapses, ignore_conflicts=True)
        events = [event for lapse in lapses for event in _invoice_events(lapse, now)]
        InvoiceEvent.objects.bulk_create(events)
    logger.log(
        logging.INFO if lapses else logging.DEBUG,
        "insurance lapses recorded: %d (%d invoice timelines)",
        len(lapses),
        len(events),
        extra={"resource": LAPSES_LOCK, "outcome": "done", "lapses": len(lapses)},
    )
    return LapseResult(acquired=True, lapses=len(lapses), invoice_events=len(events))


def _new_lapses(now: datetime) -> list[InsuranceLapse]:
    """The lapses not recorded yet: per vendor and association, the latest certificate,
    past in the association's time zone. The advisory lock keeps passes apart, so the
    lapses read as missing here are this pass's to record."""
    # A day ahead of UTC's date covers every zone's today; each is then checked in its own.
    latest = (
        VendorContract.objects.filter(insurance_expires_on__isnull=False)
        .values("vendor_id", "organization_id", "organization__time_zone")
        .annotate(insured_until=Max("insurance_expires_on"))
        .filter(insured_until__lte=now.date() + timedelta(days=1))
    )
    recorded = set(InsuranceLapse.objects.values_list("vendor_id", "organization_id", "expired_on"))
    lapses = []
    for row in latest:
        key = (row["vendor_id"], row["organization_id"], row["insured_until"])
        zone = ZoneInfo(row["organization__time_zone"])
        if key in recorded or row["insured_until"] >= timezone.localdate(now, timezone=zone):
            continue
        lapses.append(
            InsuranceLapse(
                vendor_id=key[0], organization_id=key[1], expired_on=key[2], recorded_at=now
            )
        )
    return lapses


def _invoice_events(lapse: InsuranceLapse, now: datetime) -> list[InvoiceEvent]:
    owed = Invoice.objects.owed().filter(
        organization_id=lapse.organization_id, vendor_id=lapse.vendor_id
    )
    return [
        InvoiceEvent(
            invoice_id=invoice_id,
            kind=InvoiceEvent.Kind.INSURANCE_LAPSED,
            at=now,
            actor_label=SYSTEM,
            note=lapse.expired_on.isoformat(),
        )
        for invoice_id in owed.values_list("pk", flat=True)
    ]
