"""A run's charges as CSV, and amounts in the deployment's currency."""

import csv
import io
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import resolve

from charges.models import MonthlyCharge
from charges.services import generate_monthly_charges
from hoa.models import Unit
from tests.charges_support import MONTH, MONTH_ARG

pytestmark = pytest.mark.django_db(transaction=True)

CSV_URL = f"/orgs/maple-court/charges/{MONTH_ARG}/charges.csv"


def generate(maple):
    return generate_monthly_charges(organization=maple, month=MONTH, actor=None, via="test")


def rows_of(response) -> list[list[str]]:
    body = b"".join(response.streaming_content).decode("utf-8")
    return list(csv.reader(io.StringIO(body)))


def test_the_csv_has_one_row_per_unit_in_a_stable_order_matching_the_database(client, alice, maple):
    run = generate(maple).row
    client.force_login(alice)
    response = client.get(CSV_URL)

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == (
        f'attachment; filename="charges-maple-court-{MONTH_ARG}.csv"'
    )
    header, *rows = rows_of(response)
    assert header == ["unit", "amount", "currency"]
    expected = [
        [label, str(amount), "USD"]
        for label, amount in MonthlyCharge.objects.filter(run=run)
        .order_by("unit__label")
        .values_list("unit__label", "amount")
    ]
    assert rows == expected
    assert len(rows) == run.charge_count
    assert sum(Decimal(amount) for _, amount, _ in rows) == run.total


def test_a_label_a_spreadsheet_would_run_is_quoted(client, alice, maple):
    Unit.objects.create(organization=maple, label="=HYPERLINK(1)", monthly_assessment=1)
    generate(maple)
    client.force_login(alice)
    labels = [row[0] for row in rows_of(client.get(CSV_URL))[1:]]
    assert "'=HYPERLINK(1)" in labels and "=HYPERLINK(1)" not in labels


def test_a_month_not_generated_has_no_csv(client, alice, maple):
    client.force_login(alice)
    response = client.get(CSV_URL)
    assert response.status_code == 404
    assert "have not been generated" in response.content.decode()


def test_another_associations_csv_is_not_found(client, mallory, maple):
    generate(maple)
    client.force_login(mallory)
    assert client.get(CSV_URL).status_code == 404


def test_amounts_show_the_currency_in_the_locales_format(client, alice, maple, settings):
    run = generate(maple).row
    client.force_login(alice)
    page = client.get(f"/orgs/maple-court/charges/{MONTH_ARG}/").content.decode()
    assert f"${run.total:,.2f}" in page
    assert f'href="{CSV_URL}"' in page
    settings.CURRENCY = "EUR"
    assert (
        f"€{run.total:,.2f}"
        in client.get(f"/orgs/maple-court/charges/{MONTH_ARG}/").content.decode()
    )


def test_a_head_request_answers_the_headers_and_reads_no_charge(rf, alice, maple):
    """Served by the view itself (Django's test client would drop a HEAD's body on its own,
    and gunicorn reads the body it drops): no charge is read for the headers."""
    generate(maple)
    request = rf.head(CSV_URL)
    request.user = alice
    match = resolve(CSV_URL)
    with CaptureQueriesContext(connection) as queries:
        response = match.func(request, *match.args, **match.kwargs)
        body = b"".join(response.streaming_content)
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="charges-maple-court-')
    assert body == b""
    assert not [q for q in queries.captured_queries if 'FROM "charges_monthlycharge"' in q["sql"]]
