"""Helpers shared by the tests/test_vendors_*.py modules (plain functions, not fixtures)."""

import threading
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from hoa.models import Complaint, Organization
from locking.keys import lock_key
from locking.models import FenceEvent
from tests.harness.waiting import wait_until
from vendors.models import Vendor, VendorAssignment, VendorContract
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

# Personas are created for every test; the production hasher's deliberate slowness is not
# what these tests are about. Modules set it with an autouse ``settings`` fixture.

# Bound for every wait in these tests: long enough for a loaded CI machine, short enough
# that a hang fails the test instead of the run.
WAIT = 30


def vendor_with_contract(
    name: str,
    organization: Organization,
    *,
    starts_in_days: int,
    ends_in_days: int,
    insured_for_days: int | None = 365,
) -> Vendor:
    """A vendor whose contract with ``organization`` runs from today+starts to today+ends,
    its insurance certificate valid until today+``insured_for_days`` (``None``: none on
    file)."""
    today = timezone.localdate()
    vendor = Vendor.objects.create(name=name, trade="plumbing", email=f"{name[:20]}@example.org")
    VendorContract.objects.create(
        vendor=vendor,
        organization=organization,
        starts_on=today + timedelta(days=starts_in_days),
        ends_on=today + timedelta(days=ends_in_days),
        insurance_expires_on=(
            today + timedelta(days=insured_for_days) if insured_for_days is not None else None
        ),
    )
    return vendor


def active_vendor(name: str, organization: Organization, *, insured_for_days=365) -> Vendor:
    return vendor_with_contract(
        name,
        organization,
        starts_in_days=-30,
        ends_in_days=30,
        insured_for_days=insured_for_days,
    )


def uninsured_vendor(name: str, organization: Organization, *, lapsed_days_ago: int | None):
    """A vendor under contract today whose certificate lapsed ``lapsed_days_ago`` days ago
    (``None``: none on file)."""
    insured = -lapsed_days_ago if lapsed_days_ago is not None else None
    return active_vendor(name, organization, insured_for_days=insured)


def lock_keys(redis_client) -> list[str]:
    """Every lease and fence counter key in the test Redis database."""
    keys = [*redis_client.scan_iter(match="lock:*"), *redis_client.scan_iter(match="fence:*")]
    return sorted(k.decode() if isinstance(k, bytes) else k for k in keys)


@dataclass(frozen=True)
class State:
    """What a refused request must leave unchanged."""

    assignments: tuple[tuple[int, int, bool, int], ...]  # (id, vendor, active, token)
    fence_token: int
    redis_keys: tuple[str, ...]


def state_of(complaint: Complaint, redis_client) -> State:
    rows = VendorAssignment.objects.filter(complaint=complaint).order_by("pk")
    return State(
        assignments=tuple(rows.values_list("pk", "vendor_id", "active", "fence_token")),
        fence_token=Complaint.objects.get(pk=complaint.pk).last_fence_token,
        redis_keys=tuple(lock_keys(redis_client)),
    )


def events_of(complaint: Complaint) -> list[tuple[str, int | None]]:
    """The complaint's FenceEvents as (outcome, token), oldest first."""
    events = FenceEvent.objects.filter(resource=assignment_resource(complaint.pk))
    return list(events.order_by("at", "id").values_list("outcome", "token"))


def active_assignments(complaint: Complaint) -> list[VendorAssignment]:
    return list(VendorAssignment.objects.filter(complaint=complaint, active=True))


def is_cancellation(request) -> bool:
    """A request the dispatch stand-in received is a cancellation (``…/cancel``)."""
    return request.path.endswith("/cancel")


def dispatch_of(vendor: Vendor):
    """A stand-in gate predicate: the dispatch call (not a cancellation) for ``vendor``."""
    return lambda request: (
        not is_cancellation(request) and request.json["vendor"]["id"] == vendor.pk
    )


def cancellations(stub) -> list:
    """The cancellations the dispatch stand-in received, in order."""
    return [request for request in stub.received if is_cancellation(request)]


def dispatches(stub) -> list:
    """The dispatch calls (not cancellations) the stand-in received, in order."""
    return [request for request in stub.received if not is_cancellation(request)]


class Worker(threading.Thread):
    """Run ``target()`` in a thread with its own database connection; keep what it returns
    or raises. Optionally wait at ``barrier`` first so that workers start together."""

    def __init__(self, target, *, barrier: threading.Barrier | None = None, name: str = ""):
        super().__init__(name=name or None, daemon=True)
        self.target = target
        self.barrier = barrier
        self.result = None
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def run(self):
        try:
            if self.barrier is not None:
                self.barrier.wait(timeout=WAIT)
            self.result = self.target()
        except BaseException as exc:  # kept for the test to assert on
            self.error = exc
        finally:
            connection.close()
            self.finished.set()

    def outcome(self):
        """Wait for the thread; return its result or its exception."""
        self.join(WAIT)
        assert not self.is_alive(), f"{self.name} did not finish within {WAIT}s"
        return self.error if self.error is not None else self.result


def wait_for_lease_to_expire(redis_client, complaint: Complaint) -> None:
    key = lock_key(assignment_resource(complaint.pk))
    wait_until(lambda: not redis_client.exists(key), what="the lease to expire")


def start_overtaking_reassignment(
    dispatch, redis_client, *, complaint: Complaint, vendor: Vendor, replacing, actor
):
    """Start a reassignment (the rival) and return ``(rival, gate)`` once it is inside its
    dispatch call, held at ``gate``, with its lease expired.

    The next attempt on the complaint then gets a newer token and may call its vendor too;
    releasing ``gate`` lets the rival commit first (its older token is still above the
    recorded one). The test sets a short ``VENDOR_LOCK_TTL_SECONDS`` first.
    """
    gate = dispatch.hold(dispatch_of(vendor))
    rival = Worker(
        lambda: assign_vendor(
            complaint=complaint, vendor=vendor, actor=actor, reassign=True, replacing=replacing
        ),
        name="rival",
    )
    rival.start()
    gate.wait_arrived(1)
    wait_for_lease_to_expire(redis_client, complaint)
    return rival, gate


def shown_assignments(complaints) -> dict:
    """The hidden field the admin's "Assign vendor…" page carries for ``complaints``: each
    one's active assignment as it would show it now."""
    from hoa.admin_actions import ShownRows
    from vendors import selectors

    active = {c.pk: selectors.active_assignment(c) for c in complaints}
    return {"shown": ShownRows.shown_of({pk: getattr(a, "pk", None) for pk, a in active.items()})}
