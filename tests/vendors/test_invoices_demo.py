"""The demo data of invoices (issue 38, item 5): every state, a possible duplicate, a
vendor whose certificate lapsed, and a second run that adds nothing."""

import pytest
from django.utils import timezone

from hoa.demo import seed_demo
from vendors.models import Invoice, InvoiceEvent, VendorContract, VendorPayment

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_demo_has_invoices_in_every_state_a_duplicate_and_a_lapsed_vendor():
    seed_demo()
    maple = Invoice.objects.filter(organization__slug="maple-court")

    assert set(maple.values_list("status", flat=True)) == set(Invoice.Status.values)
    once = maple.get(number="INV-1043")
    assert (once.status, once.approvals.count()) == ("received", 1)  # one of two
    duplicate = maple.get(number="INV-1048")
    assert duplicate.possible_duplicate_of == maple.get(number="INV-1041")
    assert duplicate.duplicate_confirmed_at is None
    assert maple.overdue(timezone.localdate()).exists()
    paid = maple.get(status="paid")
    assert VendorPayment.objects.get(invoice=paid).reference.startswith("DEMO-")
    events = InvoiceEvent.objects.filter(invoice=paid).order_by("at", "pk")
    assert list(events.values_list("kind", flat=True)) == [
        "recorded",
        "approved",
        "payment_sent",
        "paid",
    ]
    lapsed = VendorContract.objects.filter(
        organization__slug="maple-court",
        starts_on__lte=timezone.localdate(),
        ends_on__gte=timezone.localdate(),
        insurance_expires_on__lt=timezone.localdate(),
    )
    assert list(lapsed.values_list("vendor__name", flat=True)) == ["Keystone Masonry"]

    assert seed_demo().created == 0
