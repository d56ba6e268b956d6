"""Answers that differ from their siblings (issue 37, item 4): every error page keeps the
association's layout and a way back; one address per month and per id; every id field
takes ASCII digits only; a method an address does not take is a 405 with ``Allow`` (not
the CSRF check's 403), and HEAD works wherever GET does.

Against the real PostgreSQL and Redis: the busy month is a lease really held in Redis.
"""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from charges.models import MonthlyChargeRun
from charges.operations import charge_resource
from charges.selectors import current_month
from charges.services import generate_monthly_charges
from hoa.models import Complaint

pytestmark = pytest.mark.django_db(transaction=True)

SUBNAV = '<nav class="subnav" aria-label="Maple Court">'


@pytest.fixture
def alice_client(alice):
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def generated(maple, alice, billing):
    """This month's charges of Maple Court, generated (billing is the stand-in)."""
    month = current_month()
    generate_monthly_charges(organization=maple, month=month, actor=alice)
    return f"/orgs/maple-court/charges/{month:%Y-%m}/"


def test_the_charges_409_keeps_the_associations_layout_and_a_way_back(
    alice_client, maple, fence_lock, billing
):
    month = f"{current_month():%Y-%m}"
    fence_lock.acquire(charge_resource(maple, current_month()), ttl=timedelta(seconds=30))

    response = alice_client.post(f"/orgs/maple-court/charges/{month}/generate/")

    assert response.status_code == 409
    page = response.content.decode()
    assert "is generating the charges for Maple Court" in page
    assert SUBNAV in page  # the association's name and menu, as on the vendor 409
    assert '<a href="/orgs/maple-court/charges/" aria-current="page">Charges</a>' in page
    assert f'<a class="button" href="/orgs/maple-court/charges/{month}/">Back</a>' in page
    assert not MonthlyChargeRun.objects.exists()


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/orgs/maple-court/no-such-page/", 404),
        ("/orgs/maple-court/complaints/999999/", 404),
        ("/orgs/maple-court/charges/2026-13/", 400),
    ],
)
def test_an_error_page_of_an_association_keeps_its_layout_and_a_way_back(
    alice_client, maple, path, status
):
    response = alice_client.get(path)

    assert response.status_code == status
    page = response.content.decode()
    assert SUBNAV in page
    assert '<a class="button" href="/orgs/maple-court/" data-testid="back">' in page


def test_an_error_page_under_another_associations_address_names_none(alice_client, maple, oak):
    page = alice_client.get("/orgs/oak-ridge/no-such-page/").content.decode()

    assert "Oak Ridge" not in page  # not her association: its name is not told
    assert 'class="subnav"' not in page
    assert 'href="/" data-testid="back">Back to your associations' in page


@pytest.mark.parametrize("segment", ["2026-12%20", "%202026-12", "2026-12%0A"])
@pytest.mark.parametrize("tail", ["", "charges.csv", "generate/"])
def test_a_month_written_another_way_is_no_second_address(alice_client, generated, segment, tail):
    month = generated.rstrip("/").rsplit("/", 1)[1]
    path = f"/orgs/maple-court/charges/{segment.replace('2026-12', month)}/{tail}"
    runs = list(MonthlyChargeRun.objects.values_list("pk", "status"))

    response = alice_client.post(path) if tail == "generate/" else alice_client.get(path)

    assert response.status_code == 404, path
    assert list(MonthlyChargeRun.objects.values_list("pk", "status")) == runs
    # The one address answers.
    assert alice_client.get(f"{generated}{tail if tail != 'generate/' else ''}").status_code == 200


@pytest.mark.parametrize("spelling", ["0{pk}", "+{pk}", "%20{pk}", "{pk}%20"])
def test_an_admin_id_written_another_way_is_no_second_address(alice_client, maple, spelling):
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    address = "/admin/hoa/complaint/{}/change/"

    other = alice_client.get(address.format(spelling.format(pk=complaint.pk)))

    assert other.status_code == 302  # the admin's "doesn't exist", to its index
    assert other["Location"] == "/admin/"
    assert alice_client.get(address.format(complaint.pk)).status_code == 200


def test_the_new_complaints_unit_takes_ascii_digits_only(alice_client, maple):
    unit = maple.units.order_by("pk").first()
    other_script = str(unit.pk).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    form = {
        "title": "Leak",
        "description": "Under the sink",
        "priority": "normal",
        "reporter_name": "Ana Ruiz",
        "reporter_email": "ana@example.org",
    }

    refused = alice_client.post("/orgs/maple-court/complaints/new/", {**form, "unit": other_script})

    assert refused.status_code == 400
    assert "Choose a unit of this association." in refused.content.decode()
    assert not Complaint.objects.exists()
    taken = alice_client.post("/orgs/maple-court/complaints/new/", {**form, "unit": str(unit.pk)})
    assert taken.status_code == 303
    assert Complaint.objects.get().unit == unit


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PURGE"])
@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/healthz", "GET, HEAD"),
        ("/readyz", "GET, HEAD"),
        ("/metrics", "GET, HEAD"),
        ("/accounts/login/", "GET, HEAD, POST"),
        ("/orgs/", "GET, HEAD"),
        ("/orgs/maple-court/complaints/new/", "GET, HEAD, POST"),
        ("/orgs/maple-court/charges/2026-12/charges.csv", "GET, HEAD"),
        ("/admin/", "GET, HEAD, POST"),
    ],
)
def test_a_method_an_address_does_not_take_is_405_with_allow(
    alice_client, maple, method, path, allow
):
    response = alice_client.generic(method, path)

    assert response.status_code == 405, (method, path, response.status_code)
    assert response["Allow"] == allow
    assert "This form has expired" not in response.content.decode()


def test_a_405_under_an_associations_address_keeps_its_layout(alice_client, maple):
    response = alice_client.generic("DELETE", "/orgs/maple-court/complaints/new/")

    assert response.status_code == 405
    page = response.content.decode()
    assert SUBNAV in page and "Method not allowed" in page


def _get_routes(resolver: URLResolver, prefix: str = ""):
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            yield from _get_routes(pattern, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.callback


def test_head_works_wherever_get_does(alice_client, maple, generated):
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    values = {
        "<slug:org_slug>": "maple-court",
        "<id:pk>": str(complaint.pk),
        "<str:month>": generated.rstrip("/").rsplit("/", 1)[1],
    }
    checked = []
    for route, _view in _get_routes(get_resolver()):
        if not route.startswith("orgs/") and route not in ("healthz", "readyz", "metrics"):
            continue
        path = "/" + route
        for placeholder, value in values.items():
            path = path.replace(placeholder, value)
        if "<" in path:
            continue
        got = alice_client.get(path)
        head = alice_client.head(path)
        assert head.status_code == got.status_code, (path, got.status_code, head.status_code)
        body = b"".join(head.streaming_content) if head.streaming else head.content
        assert body == b"", path
        checked.append(path)
    assert f"{generated}charges.csv" in checked and "/healthz" in checked
    assert len(checked) >= 10
