"""Every decision carries what the person saw (issue 44, item 3), generated from the URLconf.

The walk finds every view that takes a POST under an association's pages (``orgs/<slug>/``)
and the operators' pages (``ops/``), and every registered fenced operation's views
(``view.operation``). Each must be classified below: a *decision* (it changes what a page
showed: pays, assigns, closes, voids, approves, breaks, moves a due time) with a scenario
that posts it from a page shown before someone else changed the row, or a view that
decides nothing anyone saw (it creates, or appends), with the reason. A new POST view fails
``test_every_post_view_is_classified`` until it is one or the other.

Each scenario is a person's: it GETs the page a person decides on, reads the form's fields
as the page rendered them (the hidden ones carry what it showed), lets someone else change
the row, then posts the form it read. The answer must be 409 naming what it is now, and
nothing of the decision written.
"""

import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from hoa.complaints import workflow
from hoa.models import Complaint
from hoa.operations import operations
from locking import FenceLock
from locking.keys import lock_key
from locking.models import FenceEvent
from tests.invoices_support import approve, record
from tests.vendors_support import uninsured_vendor
from vendors import insurance, invoices
from vendors.models import Invoice, VendorAssignment, VendorContract
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)

Status = Invoice.Status
LONG = timedelta(seconds=60)


# -- the walk ----------------------------------------------------------------------------------


def post_views() -> dict[str, type]:
    """Every class-based view that takes a POST, under ``orgs/`` or ``ops/``: its name."""
    found: dict[str, type] = {}

    def walk(resolver, prefix=""):
        for pattern in resolver.url_patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                view = getattr(pattern.callback, "view_class", None)
                path = prefix + str(pattern.pattern)
                if view is None or not path.startswith(("orgs/", "ops/")):
                    continue
                if "post" in view.http_method_names and hasattr(view, "post"):
                    found[f"{view.__module__}.{view.__name__}"] = view

    walk(get_resolver())
    return found


# Views that take a POST and decide nothing a page showed, with why.
NOT_DECISIONS = {
    "hoa.complaints.views.NewComplaintView": "creates a complaint: nothing shown to compare",
    "hoa.complaints.views.AddNoteView": "appends a note: changes nothing another saw",
    "vendors.invoice_views.RecordInvoiceView": "creates an invoice (its duplicate rule is a lock)",
    "charges.views.GenerateChargesView": (
        "the month is the decision, once per association and month by its key; the charges "
        "are the units' assessments at the commit, as billed"
    ),
    "tests.budgets.views.ApproveBudgetView": "the test app's year, once (its amount rule)",
}


# -- reading a page as a person's browser would ------------------------------------------------

_FORM = re.compile(r"<form(?P<attrs>[^>]*)>(?P<body>.*?)</form>", re.S)
_ACTION = re.compile(r'action="(?P<action>[^"]*)"')
_INPUT = re.compile(r"<input(?P<attrs>[^>]*)>")
_ATTR = re.compile(r'(?P<name>[a-z-]+)="(?P<value>[^"]*)"')


def form_fields(html: str, action: str, *, page: str = "") -> dict[str, str]:
    """The hidden fields of the form posting to ``action`` as the page rendered them (a
    form without an ``action`` posts to its ``page``)."""
    for form in _FORM.finditer(html):
        found = _ACTION.search(form["attrs"])
        if (found["action"] if found else page) != action:
            continue
        fields = {}
        for tag in _INPUT.finditer(form["body"]):
            attrs = {m["name"]: m["value"] for m in _ATTR.finditer(tag["attrs"])}
            if attrs.get("type") == "hidden" and attrs.get("name") != "csrfmiddlewaretoken":
                fields[attrs["name"]] = attrs.get("value", "")
        return fields
    raise AssertionError(f"no form posting to {action} on the page")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@dataclass
class Stale:
    """A scenario's answer: the response, and whether the decision wrote nothing."""

    response: object
    nothing_written: bool
    now: str  # what the 409 must name: the row as it is now


# -- the scenarios, one per decision -----------------------------------------------------------


def change_status(alice, bob, maple, **_):
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    page_url = reverse("complaints:complaint", args=[maple.slug, complaint.pk])
    action = reverse("complaints:status", args=[maple.slug, complaint.pk])
    shown = form_fields(client_for(alice).get(page_url).content.decode(), action)
    workflow.change_status(
        complaint=complaint, seen="open", to="closed", note="Duplicate", actor=bob
    )
    answer = client_for(alice).post(action, {**shown, "to_status": "resolved", "note": "Fixed"})
    row = Complaint.objects.get(pk=complaint.pk)
    return Stale(answer, row.status == "closed", "closed")


def change_sla(alice, bob, maple, **_):
    complaint = Complaint.objects.create(organization=maple, title="Leak", priority="high")
    page_url = reverse("complaints:complaint", args=[maple.slug, complaint.pk])
    action = reverse("complaints:sla", args=[maple.slug, complaint.pk])
    shown = form_fields(client_for(alice).get(page_url).content.decode(), action)
    moved = timezone.localtime(complaint.sla_due_at + timedelta(days=1)).replace(
        second=0, microsecond=0
    )
    workflow.change_sla(complaint=complaint, due_at=moved, reason="Parts", actor=bob)
    later = moved + timedelta(days=1)
    answer = client_for(alice).post(
        action, {**shown, "due_at": f"{later:%Y-%m-%dT%H:%M}", "reason": "Mine"}
    )
    row = Complaint.objects.get(pk=complaint.pk)
    return Stale(answer, row.sla_due_at == moved, "was changed since you looked")


def assign(alice, bob, maple, pipe, green, dispatch, **_):
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    page_url = reverse("complaints:complaint", args=[maple.slug, complaint.pk])
    action = reverse("vendors:assign", args=[maple.slug, complaint.pk])
    shown = form_fields(client_for(alice).get(page_url).content.decode(), action)
    assign_vendor(complaint=complaint, vendor=pipe, actor=bob)  # meanwhile
    answer = client_for(alice).post(action, {**shown, "vendor": green.pk, "reassign": "on"})
    active = VendorAssignment.objects.get(complaint=complaint, active=True)
    return Stale(answer, active.vendor_id == pipe.pk, "Pipe Pros")


def _invoice_decision(name, fields, *, prefix=""):
    """A decision on an invoice's page: ``name`` its URL name, ``fields`` what the person
    typed. Meanwhile its amount changes (and it is received again)."""

    def scenario(alice, bob, carol, assignment, payments, **_):
        invoice = approve(record(assignment, alice, number="INV-7"), bob)
        if name in ("approve", "change_amount", "reject"):  # decided while it is received
            invoices.change_amount(
                invoice=invoice, seen=invoice.version, amount=Decimal("260.00"), reason="a",
                actor=alice,
            )  # fmt: skip
            invoice.refresh_from_db()
        org = invoice.organization.slug
        page = client_for(carol).get(reverse("vendors:invoice", args=[org, invoice.pk]))
        action = reverse(f"vendors:{name}", args=[org, invoice.pk])
        shown = form_fields(page.content.decode(), action)
        invoice.refresh_from_db()
        invoices.change_amount(
            invoice=invoice, seen=invoice.version, amount=Decimal("4800.00"), reason="Roof",
            actor=alice,
        )  # fmt: skip
        before = Invoice.objects.get(pk=invoice.pk)
        answer = client_for(carol).post(action, {**shown, **fields})
        after = Invoice.objects.get(pk=invoice.pk)
        unchanged = (after.version, after.status, after.amount) == (
            before.version,
            before.status,
            before.amount,
        )
        return Stale(answer, unchanged and not payments.received, "$4,800.00")

    return scenario


def record_certificate(alice, bob, maple, **_):
    vendor = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=3)
    contract = VendorContract.objects.get(vendor=vendor)
    page_url = reverse("vendors:insurance", args=[maple.slug, vendor.pk])
    action = reverse("vendors:record_certificate", args=[maple.slug, vendor.pk])
    shown = form_fields(client_for(alice).get(page_url).content.decode(), action)
    theirs = timezone.localdate() + timedelta(days=200)
    insurance.record_certificate(
        contract=contract, expires_on=theirs, seen=contract.insurance_expires_on, actor=bob
    )
    mine = timezone.localdate() + timedelta(days=300)
    answer = client_for(alice).post(action, {**shown, "expires_on": mine.isoformat()})
    contract.refresh_from_db()
    return Stale(answer, contract.insurance_expires_on == theirs, theirs.isoformat())


def break_lease(alice, root, maple, **_):
    resource = assignment_resource(Complaint.objects.create(organization=maple, title="L").pk)
    stuck = FenceLock().acquire(resource, ttl=LONG, holder="stuck-worker")
    action = "/ops/locks/break/"
    page = client_for(root).get(action, {"resource": resource})
    shown = form_fields(page.content.decode(), action, page=action)
    stuck.release()
    healthy = FenceLock().acquire(resource, ttl=LONG, holder="healthy-worker")
    try:
        answer = client_for(root).post(action, {**shown, "reason": "hangs"})
        kept = FenceLock().client.get(lock_key(resource)).decode().startswith(healthy.owner)
        return Stale(answer, kept and not FenceEvent.objects.filter(outcome="broken"), "healthy")
    finally:
        healthy.release()


DECISIONS = {
    "hoa.complaints.views.ChangeStatusView": change_status,
    "hoa.complaints.views.ChangeSlaView": change_sla,
    "vendors.views.AssignVendorView": assign,
    "vendors.invoice_views.ApproveInvoiceView": _invoice_decision("approve", {}),
    "vendors.invoice_views.ChangeAmountView": _invoice_decision(
        "change_amount", {"amount": "300.00", "reason": "Mine"}
    ),
    "vendors.invoice_views.RejectInvoiceView": _invoice_decision(
        "reject", {"reject-reason": "Not ours"}
    ),
    "vendors.invoice_views.VoidInvoiceView": _invoice_decision(
        "void", {"void-reason": "Sent twice"}
    ),
    "vendors.invoice_views.PayInvoiceView": _invoice_decision("pay", {}),
    "hoa.ops.views.BreakLeaseView": break_lease,
    "vendors.views.RecordCertificateView": record_certificate,
}


# -- the tests ---------------------------------------------------------------------------------


def test_every_post_view_is_classified():
    """The walk's views are exactly the decisions and the non-decisions: a new view that
    takes a POST must say which it is (and a decision must bring its stale scenario)."""
    walked = post_views()
    print(f"\nPOST views walked: {len(walked)}")
    for name in sorted(walked):
        kind = "decision" if name in DECISIONS else f"not a decision: {NOT_DECISIONS.get(name)}"
        print(f"  {name}: {kind}")
    assert len(walked) >= 14  # the walk found the pages it is for
    assert set(walked) == set(DECISIONS) | set(NOT_DECISIONS)
    assert not set(DECISIONS) & set(NOT_DECISIONS)


def test_every_operation_is_decided_through_a_classified_view():
    """Every registered fenced operation has its views in the walk, classified."""
    walked = post_views()
    for operation in operations():
        views = [
            name
            for name, view in walked.items()
            if getattr(view, "operation", "") == operation.name
        ]
        assert views, f"no POST view runs {operation.name}"
        assert all(name in DECISIONS or name in NOT_DECISIONS for name in views)


@pytest.mark.parametrize("name", sorted(DECISIONS))
def test_a_decision_posted_from_a_page_shown_before_a_change_is_409_and_writes_nothing(
    name, request
):
    scenario = DECISIONS[name]
    code = scenario.__code__
    fixtures = {arg: request.getfixturevalue(arg) for arg in code.co_varnames[: code.co_argcount]}
    stale = scenario(**fixtures)
    body = stale.response.content.decode()
    assert stale.response.status_code == 409, body[:2000]
    assert stale.now in body, body[:2000]
    assert stale.nothing_written
