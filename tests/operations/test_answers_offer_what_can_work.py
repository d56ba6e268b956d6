"""A 409 offers "Try again" only when trying again can succeed (issue 47, item 3).

Every refusal answered 409 is one of two kinds in the answer table: *retry* (busy,
superseded, the status changed: the same request may succeed later; commands exit 75) or
*overtaken* (another vendor assigned, the invoice voided or changed, the complaint closed:
the same request never can; commands exit 1, and the page says what to do instead). The
first test makes every such refusal, present and future, be one or the other on purpose;
the others read the pages.
"""

from datetime import timedelta

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse

from hoa.answers.refusals import Refusal
from hoa.answers.table import ANSWERS, Answer
from locking import FenceLock
from tests.invoices_support import approve, record
from vendors import invoices
from vendors.operations import payment_resource

pytestmark = pytest.mark.django_db

# Why each 409 is the kind it is. A new refusal answered 409 fails here until it is placed.
KINDS = {
    "Busy": (Answer.RETRY, "the holder may finish or let go: trying again says which"),
    "Superseded": (Answer.RETRY, "a newer holder ran: trying again finds its work done"),
    "LeaseRanOut": (Answer.RETRY, "stopped before telling anyone: it can run again"),
    "StatusChanged": (Answer.RETRY, "the retry applies the change to the status now"),
    "SlaChanged": (Answer.RETRY, "the retry moves the SLA the page now shows"),
    "UnitsChanged": (Answer.RETRY, "the retry bills the units there are now"),
    "ChangedSinceViewed": (Answer.RETRY, "the retry replaces the vendor now assigned"),
    "AssignmentChanged": (Answer.RETRY, "the retry replaces the vendor now assigned"),
    "AmountChanged": (Answer.RETRY, "approving again tells the board the new amount"),
    "RefusedAtCommit": (Answer.RETRY, "the base of the assignment's; each says its own"),
    "AlreadyAssigned": (Answer.OVERTAKEN, "only a reassign can replace the winner"),
    "ClosedSinceViewed": (Answer.OVERTAKEN, "a closed complaint gets no vendor"),
    "InvoiceChanged": (Answer.OVERTAKEN, "the page was out of date: look again, decide"),
    "PaymentSent": (Answer.OVERTAKEN, "only paying it can settle it"),
    "InvoiceChangedBeforePaying": (Answer.OVERTAKEN, "voided, rejected or changed"),
    "CertificateChanged": (Answer.OVERTAKEN, "another certificate recorded: look again"),
}


def _every(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _every(sub)


def test_every_409_is_a_retry_or_overtaken_on_purpose():
    assert apps.ready
    conflicts = {
        cls.__name__: cls.answer
        for cls in _every(Refusal)
        if ANSWERS[getattr(cls, "answer", Answer.BAD_REQUEST)].status == 409
    }
    assert set(conflicts) == set(KINDS), "place each new 409 in KINDS, with why"
    assert conflicts == {name: kind for name, (kind, _why) in KINDS.items()}
    assert (ANSWERS[Answer.RETRY].exit_code, ANSWERS[Answer.OVERTAKEN].exit_code) == (75, 1)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _url(name: str, invoice) -> str:
    return reverse(f"vendors:{name}", args=[invoice.organization.slug, invoice.pk])


def _offers(html: str) -> list[str]:
    """The buttons of the 409's actions, and its links styled as buttons."""
    section = html.split('data-testid="conflict"')[1].split("</section>")[0]
    buttons = [part.split("</button>")[0].split(">")[-1] for part in section.split("<button")[1:]]
    links = [
        part.split("</a>")[0].split(">")[-1] for part in section.split('<a class="button"')[1:]
    ]
    return buttons + links


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("action", ["pay", "approve"])
def test_losing_to_a_void_offers_no_try_again_but_the_invoice(
    action, assignment, alice, bob, payments
):
    invoice = record(assignment, alice)
    if action == "pay":
        invoice = approve(invoice, bob)
    seen = invoice.version
    invoices.void_invoice(invoice=invoice, seen=seen, reason="Sent twice", actor=alice)

    response = _client(bob).post(_url(action, invoice), {"seen": seen})

    html = response.content.decode()
    assert response.status_code == 409
    assert "it is now void" in html
    assert "Try again" not in _offers(html) and 'class="retry"' not in html
    assert _offers(html) == ["Back"] and _url("invoice", invoice) in html


@pytest.mark.django_db(transaction=True)
def test_a_busy_payment_offers_try_again(assignment, alice, bob, payments):
    invoice = approve(record(assignment, alice), bob)
    FenceLock().acquire(payment_resource(invoice.pk), ttl=timedelta(seconds=30), holder="carol")

    response = _client(alice).post(_url("pay", invoice), {"seen": invoice.version})

    assert response.status_code == 409
    assert "Try again" in _offers(response.content.decode())


@pytest.mark.django_db(transaction=True)
def test_another_vendor_assigned_offers_this_one_instead_not_the_same_again(
    assignment, pipe, green, alice, dispatch
):
    complaint = assignment.complaint
    response = _client(alice).post(
        reverse("vendors:assign", args=["maple-court", complaint.pk]), {"vendor": green.pk}
    )

    html = response.content.decode()
    assert response.status_code == 409
    assert "already has a vendor" in html or "has been assigned" in html
    assert _offers(html)[0] == "Assign Evergreen instead"
    assert "Try again" not in _offers(html)
