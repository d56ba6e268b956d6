"""The other writes that can meet a month's charge run (docs/architecture.md, "Invariants
between operations: charges"): what holds each apart, where a test must show it.

A run bills the units its look read, then writes their charges in its transaction. A unit
deleted in between (a unit added by mistake and removed, never billed: the only one that
can be deleted) leaves the run's COPY naming a unit that is gone. Before, its foreign key
(deferred, as Django declares them) failed the run's COMMIT with an ``IntegrityError``: a
500 for the staff member, a traceback for the command, and the month start's whole batch
of associations lost with it. Now the key is checked when the charges are written
(charges 0003), the run is refused ("a unit was removed meanwhile"; nothing written, 409 /
exit 75), and the month start runs the batch's associations again one by one, with their
units read again.
"""

from decimal import Decimal

import pytest

from charges.exceptions import UnitsChanged
from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.operations import charge_resource
from charges.services import generate_monthly_charges, generate_together
from hoa.fenced import Result
from hoa.models import Unit
from locking import Outcome
from locking.models import FenceEvent
from tests.charges_support import MONTH, Worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def extra(maple):
    """A unit added by mistake: no charges yet, so it may be deleted."""
    return Unit.objects.create(organization=maple, label="M999", monthly_assessment=Decimal("1"))


def billing_of(unit: Unit):
    """A billing stand-in gate predicate: the call that bills ``unit``'s association."""
    return lambda request: request.json["organization"]["id"] == unit.organization_id


def test_a_unit_deleted_while_its_run_bills_refuses_the_run_and_writes_nothing(
    maple, extra, billing
):
    gate = billing.hold(billing_of(extra))
    run = Worker(lambda: generate_monthly_charges(organization=maple, month=MONTH, actor=None))
    gate.wait_arrived(1)  # the run read its 11 units and is billing them
    extra.delete()
    gate.release()
    run.join()

    assert isinstance(run.error, UnitsChanged), run.error
    assert run.error.answer == "retry"
    assert str(run.error).startswith(
        "A unit of Maple Court was removed while its charges for March 2026 were being "
        "generated; nothing was saved."
    )
    assert not MonthlyChargeRun.objects.exists() and not MonthlyCharge.objects.exists()
    resource = charge_resource(maple, MONTH)
    assert list(FenceEvent.objects.for_resource(resource).values_list("outcome", flat=True)) == [
        "conflict"
    ]
    # Trying again bills the units there are now.
    again = generate_monthly_charges(organization=maple, month=MONTH, actor=None)
    assert again.outcome == Outcome.COMMITTED
    assert again.row.charge_count == 10 == MonthlyCharge.objects.count()


def test_a_unit_deleted_while_a_month_start_batch_bills_costs_the_batch_nothing(
    maple, oak, extra, billing
):
    gate = billing.hold(billing_of(extra))
    batch = Worker(
        lambda: generate_together([(maple, MONTH, None), (oak, MONTH, None)], actor=None)
    )
    gate.wait_arrived(1)
    extra.delete()
    gate.release()
    batch.join()

    assert batch.error is None, batch.error
    maple_answer, oak_answer = batch.result
    assert [type(maple_answer), type(oak_answer)] == [Result] * 2
    assert maple_answer.outcome == oak_answer.outcome == Outcome.COMMITTED
    runs = MonthlyChargeRun.objects.filter(month=MONTH).order_by("organization__name")
    assert [(run.organization.slug, run.charge_count) for run in runs] == [
        ("maple-court", 10),
        ("oak-ridge", 5),
    ]
    assert MonthlyCharge.objects.count() == 15
