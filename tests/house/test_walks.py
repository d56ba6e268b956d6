"""The walks of docs/architecture.md, traced (issue 46, item 3).

A reader following a request opens every product file in which code runs while it is
served: the ``.py`` files under hoa/, charges/, vendors/ and locking/ (not migrations, not
tests, not templates) from the URL to the answer. This traces them with ``sys.setprofile``
on the serving thread (the outside's stub answers on its own thread, unseen), after one
warm-up request so that imports and caches are not counted, and checks the walks in
docs/architecture.md against the trace: every file the code opens is in the walk, and
every file of the walk is opened (the order is the one a run alone gives; among other
tests a connection made earlier or later reorders a few). ``LIMITS`` holds each walk to its
number of files, a ratchet (the reassignment's goal is 15).
"""

import re
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from hoa.models import Complaint
from tests.invoices_support import approve, record
from vendors.services import assign_vendor

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("hoa", "charges", "vendors", "locking")
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# How many product files each walk may open: lowered as the frame is thinned, never raised
# without saying why in docs/architecture.md.
LIMITS = {"reassign": 34, "payment": 33, "month start": 33}


def _product_file(filename: str) -> str | None:
    try:
        path = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    parts = path.parts
    if path.suffix != ".py" or parts[0] not in PRODUCT:
        return None
    if {"migrations", "tests"} & set(parts):
        return None
    return path.as_posix()


def _under(frame, code_name: str) -> bool:
    while frame is not None:
        if frame.f_code.co_name == code_name:
            return True
        frame = frame.f_back
    return False


def trace(work, *, serving: str | None = None) -> list[str]:
    """The product files in which code runs during ``work()``, in the order first opened;
    with ``serving``, only below the function of that name (a request: from the URL to the
    answer, ``BaseHandler._get_response``, not the middleware around it)."""
    opened: dict[str, None] = {}

    def profile(frame, event, arg):
        if event == "call":
            name = _product_file(frame.f_code.co_filename)
            if name is not None and (serving is None or _under(frame, serving)):
                opened.setdefault(name, None)

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return list(opened)


def documented(title: str) -> list[str]:
    """The files of the walk headed ``**<title>**`` in docs/architecture.md, as its
    "Traced" paragraph lists them, in order."""
    text = ARCHITECTURE.read_text()
    walk = text[text.index(f"**{title}**") :]
    traced = walk[walk.index("*Traced*") :].split("\n\n", 1)[0].split(":", 1)[1]
    return re.findall(r"`([a-z_/]+\.py)`", traced)


def narrated(title: str) -> list[str]:
    """The files of the walk's table (the path a reader follows), if it has one."""
    text = ARCHITECTURE.read_text()
    walk = text[text.index(f"**{title}**") :]
    table = walk.split("*Traced*", 1)[0]
    return re.findall(r"^\| (?:\d+|↑|—) \| `([^`]+)`", table, re.M)


def check(walk: str, title: str, opened: list[str]) -> None:
    print(f"{walk}: {len(opened)} product files: " + ", ".join(opened))
    written = documented(title)
    assert sorted(set(written)) == sorted(written), f"{title}: a file counted twice"
    missing = [name for name in opened if name not in written]
    extra = [name for name in written if name not in opened]
    assert not missing, f"{title}: opened, not in the walk: {missing}"
    assert not extra, f"{title}: in the walk, never opened: {extra}"
    # A reader starts at the URLconfs; their code ran at import, not for this request.
    off_path = [n for n in narrated(title) if n not in opened and not n.endswith("urls.py")]
    assert not off_path, f"{title}: the table follows files never opened: {off_path}"
    assert len(opened) <= LIMITS[walk], f"{walk}: {len(opened)} files > {LIMITS[walk]}"


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=True)
def test_the_reassignment_walk(maple, pipe, green, alice, dispatch):
    def complaint():
        made = Complaint.objects.create(
            organization=maple, unit=maple.units.first(), title="Leaking pipe", priority="high"
        )
        shown = assign_vendor(complaint=made, vendor=pipe, actor=alice).assignment
        return made, shown

    client = _client(alice)

    def post(made, shown):
        url = reverse("vendors:assign", args=["maple-court", made.pk])
        response = client.post(url, {"vendor": green.pk, "replacing": shown.pk})
        assert response.status_code == 303, response.content[:400]

    post(*complaint())  # warm-up: imports, caches, the first connection
    made, shown = complaint()
    check(
        "reassign",
        "A staff reassignment",
        trace(lambda: post(made, shown), serving="_get_response"),
    )


@pytest.mark.django_db(transaction=True)
def test_the_payment_walk(assignment, alice, bob, payments):
    client = _client(alice)

    def post(invoice):
        url = reverse("vendors:pay", args=["maple-court", invoice.pk])
        response = client.post(url, {"seen": invoice.version})
        assert response.status_code == 303, response.content[:400]

    post(approve(record(assignment, alice, number="WARM-1", amount=Decimal("10.00")), bob))
    invoice = approve(record(assignment, alice, number="PAY-1", amount=Decimal("20.00")), bob)
    check("payment", "A staff payment", trace(lambda: post(invoice), serving="_get_response"))


@pytest.mark.django_db(transaction=True)
def test_the_month_start_walk(maple, oak, billing):
    def generate(month: str):
        call_command("generate_monthly_charges", "--all-orgs", "--month", month, "--workers", "1")

    generate("2026-01")
    check("month start", "The month start", trace(lambda: generate("2026-02")))
