"""The Invoice admin: "Pay the selected invoices…" (the same fenced payment as the page and
the nightly run, in the shape of Django's ``delete_selected``), read-only invoices scoped to
the viewer's associations, and each association's approval threshold."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from locking import FenceLock
from tests.invoices_support import approve, assignment_of, paid_state, record
from tests.vendors_support import active_vendor
from vendors import invoices
from vendors.models import ApprovalPolicy, Invoice
from vendors.operations import payment_resource

pytestmark = pytest.mark.django_db
fenced = pytest.mark.django_db(transaction=True)

CHANGELIST = reverse("admin:vendors_invoice_changelist")
Status = Invoice.Status


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def pay(client, invoices, **fields):
    data = {"action": "pay_invoices", "_selected_action": [i.pk for i in invoices], **fields}
    return client.post(CHANGELIST, data, follow=True)


def confirm(client, asked, invoices):
    """Submit the confirmation ``asked`` showed: its rows' versions and its total."""
    form = asked.context["form"]
    shown = {name: form[name].value() for name in ("shown", "total")}
    return pay(client, invoices, apply="Pay", **shown)


def texts(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


@fenced
def test_the_pay_action_confirms_then_pays_each_once_at_its_level(
    maple, pipe, alice, bob, payments
):
    first = approve(record(assignment_of(maple, pipe, "A"), alice, number="A-1"), bob)
    second = approve(
        record(assignment_of(maple, pipe, "B"), alice, number="B-1", amount=Decimal("75.00")),
        bob,
    )
    received = record(assignment_of(maple, pipe, "C"), alice, number="C-1", amount=Decimal("9.00"))
    held = approve(
        record(assignment_of(maple, pipe, "D"), alice, number="D-1", amount=Decimal("8.00")),
        bob,
    )
    FenceLock().acquire(payment_resource(held.pk), ttl=timedelta(seconds=30), holder="cron-b")
    client = admin_client(alice)

    asked = pay(client, [first, second, received, held])
    assert asked.templates[0].name == "vendors/admin/pay_invoices.html"
    assert "Pay 4 invoices, $342.00 in all?" in asked.content.decode()
    assert payments.received == []  # nothing before the confirmation

    done = confirm(client, asked, [first, second, received, held])
    messages = texts(done)
    assert [level for level, _text in messages] == ["success", "success", "error", "warning"]
    assert messages[2][1] == "Only an approved invoice can be paid; this one is received."
    assert messages[3][1].startswith(f"Another worker is paying invoice #{held.pk}")
    assert (paid_state(first)[0], paid_state(second)[0]) == (Status.PAID, Status.PAID)
    assert len(payments.payments) == 2

    again = confirm(client, pay(client, [first]), [first])
    assert texts(again)[0][0] == "info"
    assert len(payments.payments) == 2


@fenced
def test_a_pay_confirmation_older_than_an_amount_change_pays_nothing_and_asks_again(
    maple, pipe, alice, bob, payments
):
    """The confirmation showed $250.00 + $75.00; one amount changed and was approved again
    before it was submitted: nothing is paid, and the page shows the invoices as they are."""
    first = approve(record(assignment_of(maple, pipe, "A"), alice, number="A-1"), bob)
    second = approve(
        record(assignment_of(maple, pipe, "B"), alice, number="B-1", amount=Decimal("75.00")),
        bob,
    )
    client = admin_client(alice)
    asked = pay(client, [first, second])
    assert "Pay 2 invoices, $325.00 in all?" in asked.content.decode()
    invoices.change_amount(
        invoice=second, seen=second.version, amount=Decimal("80.00"), reason="Fix", actor=alice
    )
    approve(second, bob)

    stale = confirm(client, asked, [first, second])

    assert texts(stale) == [
        (
            "warning",
            "The invoices changed since this confirmation was shown ($325.00 then, $330.00 "
            "now); nothing was paid. Check them below and confirm again.",
        )
    ]
    assert "Pay 2 invoices, $330.00 in all?" in stale.content.decode()
    assert payments.received == []
    assert paid_state(first)[0] == paid_state(second)[0] == Status.APPROVED


def test_the_pay_action_is_offered_only_with_the_pay_permission(maple, pipe, alice, bob):
    record(assignment_of(maple, pipe), alice)
    page = admin_client(alice).get(CHANGELIST)
    assert "pay_invoices" in [
        name for name, _ in page.context["action_form"].fields["action"].choices
    ]
    alice.groups.first().permissions.remove(Permission.objects.get(codename="pay_invoice"))
    refreshed = type(alice).objects.get(pk=alice.pk)
    page = admin_client(refreshed).get(CHANGELIST)
    form = page.context["action_form"]
    assert form is None or "pay_invoices" not in [n for n, _ in form.fields["action"].choices]


def test_staff_see_only_their_associations_invoices_and_change_none(
    maple, oak, pipe, alice, mallory
):
    mine = record(assignment_of(maple, pipe), alice, number="M-1")
    oak_vendor = active_vendor("Oak Pipes", oak)
    record(assignment_of(oak, oak_vendor), mallory, number="O-1")

    page = admin_client(alice).get(CHANGELIST)
    assert [invoice.number for invoice in page.context["cl"].result_list] == ["M-1"]
    change = reverse("admin:vendors_invoice_change", args=[mine.pk])
    assert admin_client(mallory).get(change).status_code == 302  # "doesn't exist"
    form = admin_client(alice).get(change)
    assert form.status_code == 200 and not form.context["has_change_permission"]
    assert admin_client(alice).get(reverse("admin:vendors_invoice_add")).status_code == 403


def test_each_association_sets_its_threshold_in_the_admin(maple, root, alice, bob, pipe):
    client = admin_client(root)
    added = client.post(
        reverse("admin:vendors_approvalpolicy_add"),
        {"organization": maple.pk, "approval_threshold": "5000.00"},
    )
    assert added.status_code == 302
    assert ApprovalPolicy.threshold_for(maple) == Decimal("5000.00")
    # 4,800 is now below it: one approval.
    invoice = record(assignment_of(maple, pipe), alice, amount=Decimal("4800.00"))
    assert approve(invoice, bob).status == Status.APPROVED
    refused = client.post(
        reverse("admin:vendors_approvalpolicy_change", args=[maple.pk]),
        {"organization": maple.pk, "approval_threshold": "-1"},
    )
    assert refused.status_code == 200 and refused.context["adminform"].form.errors
