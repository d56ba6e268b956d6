"""The admin action "Generate charges for a month…" on Organization, with its month form."""

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import RequestFactory
from django.urls import reverse

from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.operations import charge_resource
from charges.selectors import current_month
from hoa.models import Organization, StaffMembership
from locking import FenceLock
from tests.charges_support import MONTH, MONTH_ARG

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/hoa/organization/"
ACTION = "generate_charges_for_month"


def choose_action(client, *organizations):
    """The changelist POST that starts the action: it answers with the month form."""
    return client.post(
        CHANGELIST,
        {
            "action": ACTION,
            "index": "0",
            "select_across": "0",
            admin.helpers.ACTION_CHECKBOX_NAME: [org.pk for org in organizations],
        },
    )


def apply_action(client, month, *organizations, confirm: bool = True):
    """The intermediate form's POST: generate for ``month`` (confirmed: the tests' month is
    neither this one nor the next)."""
    return client.post(
        CHANGELIST,
        {
            "action": ACTION,
            admin.helpers.ACTION_CHECKBOX_NAME: [org.pk for org in organizations],
            "month": month,
            "apply": "Generate charges",
            **({"confirm": "on"} if confirm else {}),
        },
        follow=True,
    )


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in response.context["messages"]]


def test_url_of_the_changelist():
    assert reverse("admin:hoa_organization_changelist") == CHANGELIST


def test_action_asks_for_the_month_then_generates_and_reports_success(
    client, alice, maple, billing
):
    client.force_login(alice)

    form_page = choose_action(client, maple)

    assert form_page.status_code == 200
    assert form_page.templates[0].name == "admin/hoa/action_form.html"
    html = form_page.content.decode()
    assert 'type="month"' in html and f'value="{current_month():%Y-%m}"' in html
    assert f'name="_selected_action" value="{maple.pk}"' in html
    assert not MonthlyChargeRun.objects.exists()  # nothing happens before the month is chosen

    done = apply_action(client, MONTH_ARG, maple)

    assert done.redirect_chain == [(CHANGELIST, 302)]
    [(level, message)] = messages_of(done)
    assert level == "success"
    assert message.startswith("Generated 10 charges for Maple Court, March 2026")
    run = MonthlyChargeRun.objects.get(organization=maple, month=MONTH)
    assert (run.completed_by, run.charge_count) == ("alice", 10)
    assert len(billing.received) == 1


def test_action_repeated_reports_already_generated_as_info(client, alice, maple, billing):
    """Done before is not done now: the info level, as on the staff page and in the vendor
    action (one message level per kind of answer, hoa.answers.table)."""
    client.force_login(alice)
    apply_action(client, MONTH_ARG, maple)
    again = apply_action(client, MONTH_ARG, maple)

    [(level, message)] = messages_of(again)
    assert level == "info"
    assert message.startswith("Charges for Maple Court, March 2026 were already generated")
    assert MonthlyCharge.objects.count() == 10


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
@pytest.mark.parametrize(
    ("month", "reason"),
    [("2026-13", "the month must be 01 to 12"), ("next month", "use YYYY-MM"), ("", "required")],
)
def test_action_with_a_bad_month_shows_an_error_and_writes_nothing(
    client, alice, maple, billing, month, reason
):
    client.force_login(alice)
    response = apply_action(client, month, maple)

    assert response.status_code == 200
    assert response.templates[0].name == "admin/hoa/action_form.html"
    [(level, message)] = messages_of(response)
    assert level == "error" and reason in message
    assert not MonthlyChargeRun.objects.exists()
    assert billing.received == []


def test_action_reports_each_organization_with_its_own_level(client, root, maple, oak, billing):
    FenceLock().acquire(
        charge_resource(oak, MONTH), ttl=timedelta(seconds=30), holder="bob at the front desk"
    )
    client.force_login(root)
    response = apply_action(client, MONTH_ARG, maple, oak)

    [(maple_level, maple_message), (oak_level, oak_message)] = messages_of(response)
    assert maple_level == "success"
    assert maple_message.startswith("Generated 10 charges for Maple Court, March 2026")
    assert oak_level == "warning"
    # Staff's words in the admin: no host, pid or seconds ("bob at the front desk" is not
    # a user, so another worker).
    assert oak_message == (
        "Another worker is generating the charges for Oak Ridge, March 2026; "
        "this usually takes a few seconds."
    )
    assert list(MonthlyChargeRun.objects.values_list("organization__slug", flat=True)) == [
        "maple-court"
    ]


def test_action_reports_a_billing_failure_as_an_error_and_writes_nothing(
    client, alice, maple, billing
):
    billing.status = 422
    client.force_login(alice)
    response = apply_action(client, MONTH_ARG, maple)

    [(level, message)] = messages_of(response)
    assert level == "error"
    assert message == (
        "Generating the charges for Maple Court, March 2026 failed: the billing system did not "
        "accept it (HTTP 422); nothing was saved."
    )
    assert not MonthlyChargeRun.objects.exists()


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
def test_action_cannot_reach_an_organization_the_user_is_not_staff_of(
    client, mallory, maple, billing
):
    client.force_login(mallory)
    response = apply_action(client, MONTH_ARG, maple)

    # The changelist's queryset is tenant-scoped: Maple Court is not among Mallory's rows,
    # so the action runs on no organization at all.
    assert response.redirect_chain == [(CHANGELIST, 302)]
    assert messages_of(response) == []
    assert not MonthlyChargeRun.objects.exists()
    assert billing.received == []


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
def test_action_is_not_offered_without_the_permission(client, django_user_model, maple, billing):
    clerk = django_user_model.objects.create_user(username="clerk", password="pw", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_organization"))
    StaffMembership.objects.create(user=clerk, organization=maple)
    client.force_login(clerk)

    request = RequestFactory().get(CHANGELIST)
    request.user = clerk
    assert ACTION not in admin.site._registry[Organization].get_actions(request)
    assert ACTION not in client.get(CHANGELIST).content.decode()
    response = apply_action(client, MONTH_ARG, maple)
    assert response.status_code == 200  # the changelist, with no action run
    assert messages_of(response) == []
    assert not MonthlyChargeRun.objects.exists()
    assert billing.received == []


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
def test_charge_runs_offer_no_regenerate_or_delete_action(root):
    request = RequestFactory().get("/admin/charges/monthlychargerun/")
    request.user = root
    for model in (MonthlyChargeRun, MonthlyCharge):
        model_admin = admin.site._registry[model]
        assert model_admin.get_actions(request) == {}
        assert not model_admin.has_delete_permission(request)
        assert not model_admin.has_change_permission(request)
    assert ACTION in admin.site._registry[Organization].get_actions(request)


@pytest.mark.django_db
def test_action_asks_to_confirm_a_month_other_than_this_one_or_the_next(
    client, alice, maple, billing
):
    client.force_login(alice)
    response = apply_action(client, MONTH_ARG, maple, confirm=False)

    assert response.templates[0].name == "admin/hoa/action_form.html"
    [(level, message)] = messages_of(response)
    assert level == "error"
    assert message.startswith("March 2026 is neither this month nor the next")
    assert not MonthlyChargeRun.objects.exists()
    assert billing.received == []


@pytest.mark.django_db(transaction=True)
def test_action_bills_this_month_without_asking(client, alice, maple, billing):
    client.force_login(alice)
    response = apply_action(client, f"{current_month():%Y-%m}", maple, confirm=False)
    assert [level for level, _ in messages_of(response)] == ["success"]
