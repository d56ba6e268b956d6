"""Payment in the registry, as charges and assignment are (issue 38, item 6): the lock page,
the navigation, the dashboard, the admin, the metrics, breaking a lease, the demo data.
The frame names none of it: it finds the operation through its one declaration."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import transaction

from hoa import operations
from hoa.answers.refusals import Busy
from hoa.demo import staff_group
from hoa.operations import every_pages
from locking import StaleFencingToken, advance_fence
from locking.keys import lock_key
from locking.models import FenceEvent
from locking.tests.support import hidden_fields
from tests.invoices_support import paid_state
from tests.races.test_topologies_metrics import scrape, value
from vendors.models import Invoice
from vendors.operations import PAYMENT, payment_resource
from vendors.payments import pay_invoice

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=30)


def holders_of(html: str) -> str:
    return html.split('id="holders"')[1].split("</section>")[0]


def test_a_payment_lease_is_described_scanned_and_its_token_recorded(approved, payments, alice):
    pay_invoice(invoice=approved, actor=alice)  # the invoice records token 1
    resource = payment_resource(approved.pk)
    info = operations.describe_resources([resource])[resource]

    assert (info.organization, info.recorded_token) == (approved.organization, 1)
    assert info.description == f"Payment of invoice #{approved.pk} Pipe Pros PAY-1"
    assert info.url == f"/orgs/maple-court/invoices/{approved.pk}/"
    assert "vendor-payment:invoice:" in operations.scan_prefixes([approved.organization_id])


def test_lock_page_shows_a_payment_lease_to_its_associations_operators_only(
    client, approved, alice, mallory, root, fence_lock
):
    resource = payment_resource(approved.pk)
    for user in (alice, mallory):
        user.user_permissions.add(Permission.objects.get(codename="view_fenceevent"))
    with fence_lock.acquire(resource, ttl=LEASE, holder="nightly-payments") as lease:
        pages = {}
        for user in (alice, mallory, root):
            client.force_login(type(user).objects.get(pk=user.pk))
            pages[user.username] = holders_of(client.get("/ops/locks/").content.decode())

    for username in ("alice", "root"):
        row = pages[username].split(f'<tr data-resource="{resource}">')[1].split("</tr>")[0]
        assert "nightly-payments on " in row and f'<td class="num">{lease.token}</td>' in row
        assert f'href="/orgs/maple-court/invoices/{approved.pk}/"' in row
    assert resource not in pages["mallory"]


def test_staff_get_the_invoice_permissions_from_the_declaration_and_its_pages():
    granted = {f"{p.content_type.app_label}.{p.codename}" for p in staff_group().permissions.all()}
    invoices = next(
        pages for pages in every_pages() if pages.dashboard.stats.startswith("vendors/")
    )
    assert {PAYMENT.permission, *invoices.staff_permissions} <= granted
    assert "vendors.pay_invoice" in granted and "vendors.approve_invoice" in granted


def test_metrics_count_payments_under_their_operation_label(
    client, approved, payments, alice, fence_lock
):
    label = {"operation": "vendor-payment"}
    _status, before, _body = scrape(client)
    pay_invoice(invoice=approved, actor=alice)
    other = Invoice.objects.get(pk=approved.pk)
    with fence_lock.acquire(payment_resource(other.pk), ttl=LEASE), pytest.raises(Busy):
        pay_invoice(invoice=other, actor=alice)
    _status, after, body = scrape(client)

    def added(name, **labels):
        return value(after, name, **label, **labels) - value(before, name, **label, **labels)

    assert added("fence_lease_acquisitions_total") == 1
    assert added("fence_busy_total") == 1
    assert added("fenced_operation_duration_seconds_count", outcome="committed") == 1
    assert payment_resource(approved.pk) not in body


def test_breaking_a_payment_lease_fences_out_its_holder(
    client, approved, payments, alice, mallory, fence_lock, redis_client
):
    alice.user_permissions.add(Permission.objects.get(codename="break_lease"))
    mallory.user_permissions.add(Permission.objects.get(codename="break_lease"))
    stuck = fence_lock.acquire(payment_resource(approved.pk), ttl=LEASE, holder="stuck-payer")
    client.force_login(mallory)
    assert client.get("/ops/locks/break/", {"resource": stuck.resource}).status_code == 404

    client.force_login(type(alice).objects.get(pk=alice.pk))
    asked = client.get("/ops/locks/break/", {"resource": stuck.resource})
    shown = {name: values[0] for name, values in hidden_fields(asked.content.decode()).items()}
    broken = client.post("/ops/locks/break/", {**shown, "reason": "hung"})

    assert broken.status_code == 303
    assert not redis_client.exists(lock_key(stuck.resource))
    assert FenceEvent.objects.get(outcome="broken").token == stuck.token
    newer = pay_invoice(invoice=approved, actor=alice)
    assert newer.token == stuck.token + 1
    with pytest.raises(StaleFencingToken), transaction.atomic():  # the stuck holder wakes
        advance_fence(Invoice.objects.filter(pk=approved.pk), stuck)
    assert paid_state(approved)[:3] == ("paid", newer.token, newer.token)
