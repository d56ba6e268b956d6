"""Amounts and dates as people type them (issue 47, item 5): one money field for every form,
"1,000.00" and "$1,000.00" read as the pages print them; exponents, underscores and other
scripts' digits refused in one sentence; one message per mistake; invoice dates within ten
years back and a year ahead, a due date within a year after its invoice date."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django import forms
from django.contrib import admin
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from hoa.web.fields import MoneyField
from vendors.models import Invoice
from vendors.models.invoices import MAX_AMOUNT

pytestmark = pytest.mark.django_db

UNREADABLE = "Enter an amount as digits, such as 1,250.00 or $1,250.00."


def field() -> MoneyField:
    return MoneyField(min_value=Decimal("0.01"), max_value=MAX_AMOUNT)


def errors(value: str) -> list[str]:
    try:
        field().clean(value)
    except forms.ValidationError as error:
        return error.messages
    return []


@pytest.mark.parametrize(
    ("typed", "amount"),
    [
        ("1000", "1000"),
        ("1,000.00", "1000.00"),
        ("$1,000.00", "1000.00"),
        (" $ 1,234,567.5 ", "1234567.5"),
        ("12.30", "12.30"),
        (".50", "0.50"),
        ("9,999,999,999.99", "9999999999.99"),
    ],
)
def test_an_amount_is_read_as_the_pages_print_it(typed, amount):
    assert field().clean(typed) == Decimal(amount)


@pytest.mark.parametrize(
    "typed",
    [
        "1e9",
        "1E3",
        "1_000",
        "\u0661\u0660\u0660\u0660",  # Arabic-Indic digits
        "\uff11\uff10\uff10\uff10",  # full-width digits
        "1,00",
        "10,00.00",
        "1,0000",
        "NaN",
        "Infinity",
        "$",
        "1.2.3",
        "--5",
        "12 34",
    ],
)
def test_anything_else_is_refused_in_one_sentence(typed):
    assert errors(typed) == [UNREADABLE]


@pytest.mark.parametrize(
    ("typed", "sentence"),
    [
        ("99999999999999", "The amount must be at most $9,999,999,999.99."),
        ("10000000000.00", "The amount must be at most $9,999,999,999.99."),
        ("0", "The amount must be more than zero."),
        ("-5", "The amount must be more than zero."),
        ("12.345", "The amount has at most two decimals (cents)."),
    ],
)
def test_each_mistake_is_one_message(typed, sentence):
    assert errors(typed) == [sentence]


def _money_fields_of(form_class) -> dict[str, forms.Field]:
    return {
        name: field
        for name, field in form_class.base_fields.items()
        if isinstance(field, forms.DecimalField)
    }


def test_every_admin_form_that_takes_money_uses_the_one_field(root):
    """Walks the admin's registry: every change form and inline form with a decimal field
    (an association's unit assessments, the approval threshold…) gets ``MoneyField``."""
    request = RequestFactory().get("/admin/")
    request.user = root
    seen = []
    for model, model_admin in admin.site._registry.items():
        form_classes = [model_admin.get_form(request)]
        form_classes += [
            inline.get_formset(request).form for inline in model_admin.get_inline_instances(request)
        ]
        for form_class in form_classes:
            for name, money in _money_fields_of(form_class).items():
                seen.append(f"{form_class.__name__}.{name}")
                assert type(money) is MoneyField, f"{model.__name__}: {name} is {type(money)}"
    assert len(seen) >= 2, seen  # the unit's assessment, the approval threshold


def test_every_staff_form_that_takes_money_uses_the_one_field():
    import vendors.invoice_forms  # noqa: F401  (the forms are defined on import)

    def every(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from every(sub)

    checked = 0
    for form_class in set(every(forms.BaseForm)):
        if not form_class.__module__.startswith(("hoa.", "charges.", "vendors.")):
            continue
        for name, money in _money_fields_of(form_class).items():
            if isinstance(money.widget, forms.HiddenInput):
                continue  # a total the page showed, echoed back, never typed
            checked += 1
            assert type(money) is MoneyField, f"{form_class.__qualname__}.{name}"
    assert checked >= 2


def _record(client: Client, assignment, **values):
    today = timezone.localdate()
    data = {
        "assignment": assignment.pk,
        "number": "INV-1",
        "amount": "10.00",
        "issued_on": today.isoformat(),
        "due_on": today.isoformat(),
        **values,
    }
    new = reverse("vendors:record_invoice", args=["maple-court", assignment.complaint_id])
    return client.post(new, data)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_invoice_for_1_000_00_is_recorded_as_typed(assignment, alice):
    response = _record(_client(alice), assignment, amount="$1,000.00")

    assert response.status_code == 303
    assert Invoice.objects.get().amount == Decimal("1000.00")


@pytest.mark.parametrize("typed", ["1e9", "1_000", "\u0661\u0660"])
def test_an_amount_typed_wrong_is_a_400_and_nothing_is_written(assignment, alice, typed):
    response = _record(_client(alice), assignment, amount=typed)

    assert response.status_code == 400
    assert "Enter an amount as digits, such as 1,250.00 or $1,250.00." in response.content.decode()
    assert not Invoice.objects.exists()


def test_an_amount_over_the_maximum_is_one_message(assignment, alice):
    response = _record(_client(alice), assignment, amount="99999999999999")

    html = response.content.decode()
    assert response.status_code == 400
    assert html.count("The amount must be at most $9,999,999,999.99.") == 1
    assert "digits" not in html.split('name="amount"')[1].split("</form>")[0].lower()
    assert not Invoice.objects.exists()


def _years(day: date, years: int) -> date:
    return (
        day.replace(year=day.year + years)
        if (day.month, day.day) != (2, 29)
        else day.replace(year=day.year + years, day=28)
    )


@pytest.mark.parametrize(
    ("values", "sentence"),
    [
        ({"issued_on": "1900-01-01", "due_on": "1900-01-01"}, "issued"),
        ({"issued_on": "9999-12-31", "due_on": "9999-12-31"}, "issued"),
        ({"due_on": "9999-12-31"}, "due"),
    ],
)
def test_a_date_out_of_range_is_a_400_that_says_the_range(assignment, alice, values, sentence):
    today = timezone.localdate()
    response = _record(_client(alice), assignment, **values)

    html = response.content.decode()
    assert response.status_code == 400
    if sentence == "issued":
        expected = (
            f"The invoice date must be between {_years(today, -10).isoformat()} "
            f"and {_years(today, 1).isoformat()}."
        )
    else:
        expected = (
            f"The due date must be between the invoice date ({today.isoformat()}) "
            f"and {_years(today, 1).isoformat()}."
        )
    assert expected in html
    assert not Invoice.objects.exists()


def test_the_service_refuses_the_same_dates_for_every_caller(assignment, alice):
    from vendors import invoices
    from vendors.exceptions import InvoiceRefused, InvoiceRule

    today = timezone.localdate()
    with pytest.raises(InvoiceRefused) as refused:
        invoices.record_invoice(
            assignment=assignment,
            number="INV-9",
            amount=Decimal("10"),
            issued_on=date(1900, 1, 1),
            due_on=today,
            actor=alice,
        )
    assert refused.value.rule == InvoiceRule.ISSUED_OUT_OF_RANGE
    with pytest.raises(InvoiceRefused) as refused:
        invoices.record_invoice(
            assignment=assignment,
            number="INV-9",
            amount=Decimal("10"),
            issued_on=today,
            due_on=today + timedelta(days=400),
            actor=alice,
        )
    assert refused.value.rule == InvoiceRule.DUE_OUT_OF_RANGE
    assert not Invoice.objects.exists()
