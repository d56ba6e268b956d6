"""A row several associations rely on (a vendor under contract with Maple Court and Oak
Ridge) is changed only through what each association owns of it: its contract.

alice is staff of Maple Court only, with every permission on vendors and contracts.
"""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db.models import ProtectedError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from hoa.models import AccessDenial
from vendors.models import Vendor, VendorContract

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_with_vendor_rights(alice):
    alice.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="vendors", content_type__model__in=["vendor", "vendorcontract"]
        )
    )
    return alice


@pytest.fixture
def shared(pipe, oak) -> Vendor:
    """Pipe Pros, under contract with Maple Court (``pipe``) and with Oak Ridge."""
    today = timezone.localdate()
    VendorContract.objects.create(
        vendor=pipe,
        organization=oak,
        starts_on=today - timedelta(days=10),
        ends_on=today + timedelta(days=100),
        insurance_expires_on=today + timedelta(days=365),
    )
    return pipe


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def oak_contracts(vendor) -> int:
    return VendorContract.objects.filter(vendor=vendor, organization__slug="oak-ridge").count()


def test_staff_of_one_association_cannot_delete_a_vendor_another_relies_on(
    shared, alice_with_vendor_rights
):
    client = client_of(alice_with_vendor_rights)
    url = reverse("admin:vendors_vendor_delete", args=[shared.pk])

    assert client.get(url).status_code == 403
    assert client.post(url, {"post": "yes"}).status_code == 403

    assert Vendor.objects.filter(pk=shared.pk).exists()
    assert oak_contracts(shared) == 1


def test_delete_selected_deletes_no_vendor_another_association_relies_on(
    shared, alice_with_vendor_rights
):
    client = client_of(alice_with_vendor_rights)
    changelist = reverse("admin:vendors_vendor_changelist")

    answer = client.post(
        changelist, {"action": "delete_selected", "_selected_action": [shared.pk], "post": "yes"}
    )

    assert answer.status_code == 200  # the confirmation page, naming what it may not delete
    assert "Pipe Pros" in answer.content.decode()
    assert Vendor.objects.filter(pk=shared.pk).exists()
    assert oak_contracts(shared) == 1
    assert AccessDenial.objects.filter(reason=AccessDenial.Reason.PERMISSION).exists()


def test_staff_change_only_their_own_contract_of_a_shared_vendor(
    shared, maple, alice_with_vendor_rights
):
    client = client_of(alice_with_vendor_rights)
    url = reverse("admin:vendors_vendor_change", args=[shared.pk])
    mine = VendorContract.objects.get(vendor=shared, organization=maple)
    new_end = mine.ends_on + timedelta(days=30)
    form = {
        "name": "Renamed by Maple",
        "trade": "roofing",
        "email": "maple@example.org",
        "contracts-TOTAL_FORMS": "1",
        "contracts-INITIAL_FORMS": "1",
        "contracts-MIN_NUM_FORMS": "0",
        "contracts-MAX_NUM_FORMS": "1000",
        "contracts-0-id": str(mine.pk),
        "contracts-0-vendor": str(shared.pk),
        "contracts-0-organization": str(maple.pk),
        "contracts-0-starts_on": mine.starts_on.isoformat(),
        "contracts-0-ends_on": new_end.isoformat(),
        "contracts-0-insurance_expires_on": mine.insurance_expires_on.isoformat(),
    }

    answer = client.post(url, form)

    assert answer.status_code == 302
    shared.refresh_from_db()
    mine.refresh_from_db()
    assert (shared.name, shared.trade) == ("Pipe Pros", "plumbing")  # the vendor's own
    assert mine.ends_on == new_end  # Maple Court's contract is Maple Court's to change
    assert oak_contracts(shared) == 1


def test_staff_of_every_association_relying_on_a_vendor_may_change_it(
    shared, oak, alice_with_vendor_rights
):
    alice_with_vendor_rights.memberships.create(organization=oak)
    client = client_of(alice_with_vendor_rights)
    url = reverse("admin:vendors_vendor_change", args=[shared.pk])

    page = client.get(url)

    assert page.status_code == 200
    assert 'name="name"' in page.content.decode()  # an input, not a read-only line


def test_the_database_keeps_a_vendor_whose_contracts_associations_still_hold(shared):
    with pytest.raises(ProtectedError):
        shared.delete()
    assert oak_contracts(shared) == 1
