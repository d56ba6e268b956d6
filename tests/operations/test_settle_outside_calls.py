"""settle_outside_calls: the job that settles outside calls of unknown outcome.

Its settling per operation is tested with each operation
(tests/charges/test_charges_service.py, tests/vendors/test_vendors_service.py,
tests/vendors/test_payments_service.py); here, the command's exit codes, the advisory lock
and the metric.
"""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from hoa.answers.refusals import OutcomeUnknown
from hoa.jobs.scheduled import pass_lock
from hoa.jobs.settling import SETTLE_LOCK, UnsettledCallsCollector, settle_outside_calls
from hoa.models import OutsideCall
from vendors.payments import pay_invoice

pytestmark = pytest.mark.django_db(transaction=True)


def settle() -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("settle_outside_calls", stdout=out, stderr=StringIO())
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, out.getvalue().strip()


@pytest.fixture
def unknown_payment(approved, payments, alice):
    payments.lose_answer = lambda request: "500"
    with pytest.raises(OutcomeUnknown):
        pay_invoice(invoice=approved, actor=alice)
    return approved


def test_nothing_to_settle_exits_0(db):
    assert settle() == (0, "0 outside call(s) settled.")


def test_a_call_still_unknown_exits_75_and_counts_its_try(unknown_payment, payments):
    assert settle() == (75, "0 outside call(s) settled; 1 still not known.")
    call = OutsideCall.objects.get()
    assert (call.tries, call.is_settled) == (1, False)

    payments.lose_answer = None
    assert settle() == (0, "1 outside call(s) settled.")
    call.refresh_from_db()
    assert (call.tries, call.settlement) == (2, OutsideCall.Settlement.DONE)
    assert len(payments.payments) == 1


def test_a_pass_another_host_holds_is_skipped(unknown_payment, payments):
    payments.lose_answer = None
    with pass_lock(SETTLE_LOCK, wait=None) as acquired:
        assert acquired
        assert settle_outside_calls().skipped
    assert not OutsideCall.objects.get().is_settled


def test_the_metric_shows_the_oldest_unsettled_call_and_counts_by_operation(unknown_payment):
    oldest, unsettled = UnsettledCallsCollector().collect()
    assert oldest.samples[0].value >= 0
    assert [(s.labels, s.value) for s in unsettled.samples] == [
        ({"operation": "vendor-payment"}, 1)
    ]
