"""Staff pages of invoices (issue 38, item 5): the list with its filters, totals and CSV;
the invoice page and its POSTs (approve, change the amount, reject, void, pay), each
answered through the answer table; recording an invoice with its PDF from a complaint."""

import csv
import io
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from hoa.models import AccessDenial
from locking import FenceLock
from tests.invoices_support import (
    AMOUNT,
    LARGE,
    PDF,
    approve,
    assignment_of,
    paid_state,
    pdf_upload,
    record,
    state_of,
    timeline,
)
from tests.vendors_support import active_vendor
from vendors import invoices
from vendors.models import ApprovalPolicy, Invoice, InvoiceDocument, VendorPayment
from vendors.operations import payment_resource

pytestmark = pytest.mark.django_db
fenced = pytest.mark.django_db(transaction=True)
Status = Invoice.Status


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(name: str, invoice: Invoice) -> str:
    return reverse(f"vendors:{name}", args=[invoice.organization.slug, invoice.pk])


def list_url(organization, **query) -> str:
    path = reverse("vendors:invoices", args=[organization.slug])
    if not query:
        return path
    return path + "?" + "&".join(f"{key}={value}" for key, value in query.items())


def listed(response) -> list[int]:
    html = response.content.decode()
    return [int(part.split('"')[0]) for part in html.split('data-invoice="')[1:]]


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in response.context["messages"]]


@pytest.fixture
def book(maple, pipe, green, alice, bob):
    """Maple Court's invoices in every state worth filtering: received (one overdue, one
    of Evergreen's, one above the threshold approved once by bob), approved, paid (this
    month), rejected."""
    today = timezone.localdate()
    make = lambda vendor, number, amount, due, title: record(  # noqa: E731
        assignment_of(maple, vendor, title),
        alice,
        number=number,
        amount=Decimal(amount),
        issued_on=today - timedelta(days=40),
        due_on=today + timedelta(days=due),
    )
    received = make(pipe, "R-1", "100.00", 10, "Pipe job")
    overdue = make(pipe, "O-1", "200.00", -3, "Old pipe job")
    evergreen = make(green, "E-1", "300.00", 10, "Lawn")
    large = approve(make(pipe, "L-1", str(LARGE), 10, "Boiler"), bob)
    approved = approve(make(green, "A-1", "400.00", 10, "Hedge"), bob)
    paid = approve(make(pipe, "P-1", "500.00", 10, "Leak"), bob)
    Invoice.objects.filter(pk=paid.pk).update(status=Status.PAID, payment_claim=1)
    VendorPayment.objects.create(
        invoice=paid, amount=paid.amount, currency="USD", reference="REF-1", fence_token=1
    )
    rejected = make(pipe, "X-1", "600.00", 10, "Not done")
    invoices.reject_invoice(invoice=rejected, seen=1, reason="Work not done", actor=alice)
    return {
        "received": received,
        "overdue": overdue,
        "evergreen": evergreen,
        "large": large,
        "approved": approved,
        "paid": paid,
        "rejected": rejected,
    }


# -- the list -----------------------------------------------------------------------------------


def test_the_list_shows_totals_owed_and_paid_this_month_and_filters(book, maple, alice, bob, green):
    client = client_for(alice)
    page = client.get(list_url(maple))
    html = page.content.decode()

    assert page.status_code == 200
    assert len(listed(page)) == 7
    totals = html.split('data-testid="invoice-totals"')[1].split("</div>\n</div>")[0]
    # Owed: received and approved (100 + 200 + 300 + 4,800 + 400).
    assert "$5,800.00" in totals and "owed on 5 invoices" in totals
    assert "$500.00" in totals and "paid this month (1 payment since" in totals

    by = lambda **query: sorted(listed(client.get(list_url(maple, **query))))  # noqa: E731
    assert by(status="approved") == [book["approved"].pk]
    assert by(vendor=green.pk) == sorted([book["evergreen"].pk, book["approved"].pk])
    assert by(overdue="yes") == [book["overdue"].pk]
    # Alice recorded them all: by the association's default rule, none is hers to approve.
    assert by(waiting="me") == []
    assert sorted(listed(client_for(bob).get(list_url(maple, waiting="me")))) == sorted(
        [book["received"].pk, book["overdue"].pk, book["evergreen"].pk]
    )


def test_a_filter_that_does_not_validate_is_a_400_saying_which(book, maple, alice, oak):
    oak_vendor = active_vendor("Oak Pipes", oak)
    client = client_for(alice)
    for query, sentence in (
        ({"status": "lost"}, "Choose a status from the list."),
        ({"vendor": oak_vendor.pk}, "Choose a vendor of this association."),
        ({"vendor": "\uff11"}, "Choose a vendor of this association."),
    ):
        response = client.get(list_url(maple, **query))
        assert response.status_code == 400, query
        assert sentence in response.content.decode()


def test_the_csv_gives_the_accountant_the_filtered_invoices(book, maple, alice):
    Invoice.objects.filter(pk=book["received"].pk).update(number='=HYPERLINK("x")')
    response = client_for(alice).get(
        reverse("vendors:invoices_csv", args=[maple.slug]) + "?status=received"
    )

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="invoices-maple-court.csv"'
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == [
        "invoice",
        "vendor",
        "vendor_invoice_number",
        "invoice_date",
        "due_date",
        "amount",
        "currency",
        "status",
        "paid_at",
        "payment_reference",
        "complaint",
    ]
    numbers = {row[2]: row for row in rows[1:]}
    assert sorted(numbers) == ['\'=HYPERLINK("x")', "E-1", "L-1", "O-1"]
    assert numbers["O-1"][5:8] == ["200.00", "USD", "received"]
    paid = client_for(alice).get(
        reverse("vendors:invoices_csv", args=[maple.slug]) + "?status=paid"
    )
    [_, row] = list(csv.reader(io.StringIO(b"".join(paid.streaming_content).decode())))
    assert (row[2], row[9]) == ("P-1", "REF-1") and row[8]


def test_the_pages_are_the_associations_staffs_only(book, maple, mallory, viewer):
    invoice = book["received"]
    assert client_for(mallory).get(list_url(maple)).status_code == 404
    assert client_for(mallory).get(url("invoice", invoice)).status_code == 404
    assert client_for(viewer).get(list_url(maple)).status_code == 403
    oak_url = reverse("vendors:invoice", args=["oak-ridge", invoice.pk])
    assert client_for(mallory).get(oak_url).status_code == 404  # an id of another association
    assert AccessDenial.objects.filter(reason="tenant").count() >= 2


# -- one invoice --------------------------------------------------------------------------------


def test_the_invoice_page_shows_its_facts_approvals_and_timeline(book, carol):
    invoice = book["large"]
    html = client_for(carol).get(url("invoice", invoice)).content.decode()

    assert "$4,800.00" in html and "L-1" in html
    approvals = html.split('data-testid="approvals"')[1].split("</section>")[0]
    assert "Above $1,000.00: two approvals by two different people" in approvals
    assert "bob approved $4,800.00 on" in approvals
    assert 'data-testid="approve-form"' in approvals
    events = html.split('data-testid="timeline"')[1].split("</ol>")[0]
    assert events.index("First approval") < events.index("Recorded")


def approvals_card(user, invoice) -> tuple[str, str]:
    html = client_for(user).get(url("invoice", invoice)).content.decode()
    return html.split('data-testid="approvals"')[1].split("</section>")[0], html


def test_the_invoice_page_says_where_its_approvals_stand_and_to_whom_no_button(
    book, alice, bob, carol
):
    """Issue 47, item 2: "1 of 2 approvals — waiting for someone other than …", and no
    Approve button for whom it would refuse: the reason in its place."""
    invoice = book["large"]  # recorded by alice, approved once by bob

    card, html = approvals_card(bob, invoice)
    standing = html.split('data-testid="approval-standing"')[1].split("</span>")[0]
    assert standing == ">1 of 2 approvals — waiting for someone other than bob and alice"
    assert 'data-testid="approve-form"' not in card
    assert "You have approved this invoice already" in card
    assert (
        "The person who records an invoice may not approve it (this association&#x27;s rule)."
        in card
    )

    card, _ = approvals_card(alice, invoice)
    assert 'data-testid="approve-form"' not in card
    assert "You recorded this invoice, and this association&#x27;s rule is that" in card

    card, _ = approvals_card(carol, invoice)
    assert 'data-testid="approve-form"' in card
    assert "not-yours-to-approve" not in card

    _, html = approvals_card(carol, book["received"])  # below the threshold, none yet
    standing = html.split('data-testid="approval-standing"')[1].split("</span>")[0]
    assert standing == ">0 of 1 approval — waiting for someone other than alice"


def test_an_association_that_lets_the_recorder_approve_says_so_and_offers_them_the_button(
    book, maple, alice
):
    ApprovalPolicy.objects.create(organization=maple, recorder_may_approve=True)

    card, _ = approvals_card(alice, book["received"])
    assert 'data-testid="approve-form"' in card
    assert "may give its first approval, never the second (this association&#x27;s rule)" in card
    card, _ = approvals_card(alice, book["large"])  # bob approved first: never second
    assert "the second approval must come from someone else" in card
    assert 'data-testid="approve-form"' not in card


def test_approving_through_the_page_is_a_303_with_a_message(book, carol):
    invoice = book["large"]
    response = client_for(carol).post(
        url("approve", invoice), {"seen": invoice.version}, follow=True
    )

    assert response.redirect_chain == [(url("invoice", invoice), 303)]
    assert messages_of(response) == [
        ("success", f"Invoice #{invoice.pk} is approved: it can be paid.")
    ]
    assert state_of(invoice)[0] == Status.APPROVED


def test_a_change_posted_from_an_out_of_date_page_is_a_409_saying_what_it_is_now(
    book, alice, carol
):
    invoice = book["received"]
    invoices.change_amount(
        invoice=invoice, seen=1, amount=Decimal("110.00"), reason="Typo", actor=alice
    )
    response = client_for(carol).post(url("approve", invoice), {"seen": 1})

    assert response.status_code == 409
    html = response.content.decode()
    assert (
        f"Invoice #{invoice.pk} changed since you looked: it is now received, for $110.00" in html
    )
    assert 'class="retry"' not in html  # look again first: no blind "try again"
    assert url("invoice", invoice) in html
    assert state_of(invoice)[3] == []


@pytest.mark.parametrize("action", ["reject", "void", "change_amount"])
def test_a_change_without_its_reason_is_a_400_on_the_invoice_page(book, alice, action):
    invoice = book["received"]
    prefix = "" if action == "change_amount" else f"{action}-"
    data = {f"{prefix}seen": 1, f"{prefix}reason": ""}
    if action == "change_amount":
        data["amount"] = "99.00"
    response = client_for(alice).post(url(action, invoice), data)

    assert response.status_code == 400
    assert "Say why." in response.content.decode()
    assert state_of(invoice)[:3] == (Status.RECEIVED, 1, Decimal("100.00"))


def test_voiding_and_changing_need_their_permissions(book, viewer, alice):
    invoice = book["received"]
    assert (
        client_for(viewer)
        .post(url("void", invoice), {"void-seen": 1, "void-reason": "x"})
        .status_code
        == 403
    )
    done = client_for(alice).post(url("void", invoice), {"void-seen": 1, "void-reason": "Twice"})
    assert done.status_code == 303
    assert timeline(invoice)[-1] == ("voided", "alice", "received", "void", "Twice")


def test_a_get_on_a_post_address_leads_to_the_invoice(book, alice):
    invoice = book["received"]
    response = client_for(alice).get(url("approve", invoice))
    assert (response.status_code, response["Location"]) == (302, url("invoice", invoice))


# -- paying from the page -----------------------------------------------------------------------


@fenced
def test_paying_from_the_page_is_a_303_and_again_an_info_already_paid(approved, payments, alice):
    client = client_for(alice)
    first = client.post(url("pay", approved), {"seen": approved.version}, follow=True)
    second = client.post(url("pay", approved), {"seen": approved.version}, follow=True)

    reference = VendorPayment.objects.get().reference
    assert messages_of(first) == [
        ("success", f"Paid Pipe Pros $250.00 for invoice #{approved.pk} (reference {reference}).")
    ]
    assert messages_of(second)[0][0] == "info"
    assert len(payments.payments) == 1
    assert f"reference {reference}" in second.content.decode()


@fenced
def test_paying_a_busy_invoice_is_a_409_naming_the_person_with_a_retry(
    approved, payments, alice, bob
):
    FenceLock().acquire(payment_resource(approved.pk), ttl=timedelta(seconds=30), holder="bob")
    response = client_for(alice).post(url("pay", approved), {"seen": approved.version})

    assert response.status_code == 409
    html = response.content.decode()
    assert f"Another staff member (bob) is paying invoice #{approved.pk}" in html
    assert 'class="retry"' in html
    assert payments.received == []


@fenced
def test_paying_an_invoice_voided_since_the_page_was_shown_is_a_409(approved, payments, alice):
    seen = approved.version
    invoices.void_invoice(invoice=approved, seen=seen, reason="Sent twice", actor=alice)
    response = client_for(alice).post(url("pay", approved), {"seen": seen})

    assert response.status_code == 409
    assert "changed since you looked: it is now void" in response.content.decode()
    assert payments.received == []


@fenced
@pytest.mark.parametrize(("broken", "status"), [("url", 503), ("service", 502)])
def test_no_payment_service_is_503_and_a_failed_one_502(
    approved, payments, alice, settings, broken, status
):
    if broken == "url":
        settings.VENDOR_PAYMENT_URL = ""
    else:
        payments.status = 422
    response = client_for(alice).post(url("pay", approved), {"seen": approved.version})
    assert response.status_code == status
    assert paid_state(approved)[0] == Status.APPROVED


@fenced
def test_a_pay_posted_from_a_page_shown_before_the_amount_changed_is_409_and_pays_nothing(
    approved, payments, alice, bob, carol
):
    """The page said "Pay … $250.00" (its version); meanwhile the amount became $4,800.00
    and it was approved again. The stale POST is refused, naming what it is now."""
    shown = approved.version
    invoices.change_amount(
        invoice=approved, seen=shown, amount=Decimal("4800.00"), reason="Roof too", actor=alice
    )
    for approver in (bob, carol):
        if Invoice.objects.get(pk=approved.pk).status != Status.APPROVED:
            approve(approved, approver)
    assert Invoice.objects.get(pk=approved.pk).status == Status.APPROVED

    response = client_for(alice).post(url("pay", approved), {"seen": shown})

    assert response.status_code == 409
    assert "it is now approved, for $4,800.00" in response.content.decode()
    assert payments.received == []
    assert paid_state(approved) == (Status.APPROVED, None, 0, [])


@fenced
def test_a_payment_whose_answer_is_lost_is_answered_not_known_yet_202(approved, payments, alice):
    payments.lose_answer = lambda request: "500"
    response = client_for(alice).post(url("pay", approved), {"seen": approved.version})

    assert response.status_code == 202
    page = response.content.decode()
    assert "Not known yet" in page
    assert "will be settled automatically" in page
    assert paid_state(approved)[:2] == (Status.APPROVED, 1)  # claimed: sent for payment


def test_the_pay_button_is_offered_for_approved_invoices_to_those_who_may_pay(
    book, alice, viewer, settings
):
    settings.VENDOR_PAYMENT_URL = "http://127.0.0.1:9/pay"
    approved_page = client_for(alice).get(url("invoice", book["approved"])).content.decode()
    received_page = client_for(alice).get(url("invoice", book["received"])).content.decode()
    assert 'data-testid="pay"' in approved_page and "Pay Evergreen $400.00" in approved_page
    assert 'data-testid="pay"' not in received_page
    settings.VENDOR_PAYMENT_URL = ""
    unset = client_for(alice).get(url("invoice", book["approved"])).content.decode()
    assert "No payment service is configured" in unset


# -- recording, and the complaint's invoices ----------------------------------------------------


def test_recording_an_invoice_with_its_pdf_from_the_complaint(assignment, alice, mallory):
    complaint = assignment.complaint
    new = reverse("vendors:record_invoice", args=["maple-court", complaint.pk])
    today = timezone.localdate()
    client = client_for(alice)
    response = client.post(
        new,
        {
            "assignment": assignment.pk,
            "number": "INV-77",
            "amount": "250.00",
            "issued_on": today.isoformat(),
            "due_on": (today + timedelta(days=30)).isoformat(),
            "pdf": pdf_upload(),
        },
    )

    invoice = Invoice.objects.get()
    assert (response.status_code, response["Location"]) == (303, url("invoice", invoice))
    assert (invoice.number, invoice.amount, invoice.recorded_by) == ("INV-77", AMOUNT, alice)
    download = client.get(url("invoice_pdf", invoice))
    assert (download.status_code, download["Content-Type"]) == (200, "application/pdf")
    assert download["Content-Disposition"] == f'attachment; filename="invoice-{invoice.pk}.pdf"'
    assert download.content == PDF
    assert client_for(mallory).get(url("invoice_pdf", invoice)).status_code == 404

    complaint_page = client.get(reverse("complaints:complaint", args=["maple-court", complaint.pk]))
    facts = complaint_page.content.decode().split('data-testid="complaint-invoices"')[1]
    assert "Pipe Pros INV-77" in facts.split("</dd>")[0]


@pytest.mark.parametrize(
    ("change", "sentence"),
    [
        ({"pdf": "not-a-pdf"}, "The file is not a PDF. Attach the invoice as a PDF."),
        ({"number": ""}, "This field is required."),
        ({"amount": "0"}, "The amount must be more than zero."),
        ({"amount": "12.345"}, "The amount has at most two decimals (cents)."),
        ({"due_on": "2000-01-01"}, "The due date must be on or after the invoice date"),
        ({"issued_on": "\uff12\uff10\uff12\uff16-01-01"}, "Enter a valid date."),
        ({"assignment": "999999"}, "Choose one of this complaint&#x27;s vendors."),
    ],
)
def test_a_bad_invoice_is_a_400_with_the_form_and_nothing_is_written(
    assignment, alice, change, sentence
):
    today = timezone.localdate()
    data = {
        "assignment": assignment.pk,
        "number": "INV-1",
        "amount": "10.00",
        "issued_on": today.isoformat(),
        "due_on": today.isoformat(),
    }
    data.update(change)
    if data.get("pdf") == "not-a-pdf":
        data["pdf"] = pdf_upload(b"GIF89a not a pdf", "invoice.pdf")
    new = reverse("vendors:record_invoice", args=["maple-court", assignment.complaint_id])
    response = client_for(alice).post(new, data)

    assert response.status_code == 400
    assert sentence in response.content.decode()
    assert not Invoice.objects.exists() and not InvoiceDocument.objects.exists()


def test_a_number_the_vendor_used_already_is_a_400_naming_the_invoice(assignment, alice):
    existing = record(assignment, alice, number="DUP-1")
    today = timezone.localdate()
    new = reverse("vendors:record_invoice", args=["maple-court", assignment.complaint_id])
    response = client_for(alice).post(
        new,
        {
            "assignment": assignment.pk,
            "number": "dup-1",
            "amount": "10.00",
            "issued_on": today.isoformat(),
            "due_on": today.isoformat(),
        },
    )
    assert response.status_code == 400
    assert f"is already recorded (invoice #{existing.pk}, Received)" in response.content.decode()
    assert Invoice.objects.count() == 1


def test_the_dashboard_and_the_navigation_show_the_invoices(book, maple, bob):
    html = client_for(bob).get(reverse("hoa:dashboard", args=[maple.slug])).content.decode()
    panel = html.split('data-testid="invoices"')[1].split("</div>")[0]
    assert (
        "$5,800.00" in panel and "owed to vendors on 5 invoices" in panel and "1 overdue" in panel
    )
    assert "3 waiting for your approval" in panel
    subnav = html.split('<nav class="subnav"')[1].split("</nav>")[0]
    assert f'href="/orgs/{maple.slug}/invoices/"' in subnav


def test_rejecting_and_voiding_each_say_which_reason_they_ask_for(book, alice):
    html = client_for(alice).get(url("invoice", book["large"])).content.decode()
    labels = re.findall(r"<label for=\"id_(?:reject|void)-reason\">([^<]+)</label>", html)
    assert labels == ["Why the association disputes it:", "Why it is voided:"]


def test_the_invoice_page_has_its_way_back_first_above_its_title(book, alice):
    html = client_for(alice).get(url("invoice", book["large"])).content.decode()
    first = html.split('<main id="main">', 1)[1].lstrip().split("\n", 1)[0]
    assert first == (
        '<p class="back"><a href="/orgs/maple-court/invoices/" data-testid="back-link">'
        "← All invoices</a></p>"
    )
