"""The budgets' staff page and its approve button, and the budgets' own admin: each
answer of the third operation through the one answer table."""

import html
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.test import RequestFactory
from django.urls import reverse

from hoa.models import AccessDenial
from locking import FenceLock
from locking.models import FenceEvent
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import budget_resource
from tests.budgets.services import approve_budget
from tests.budgets_support import AMOUNT, YEAR, state_of
from tests.charges_support import dead_redis_url

pytestmark = pytest.mark.django_db(transaction=True)

BUDGETS_URL = "/orgs/maple-court/budgets/"
APPROVE_URL = f"/orgs/maple-court/budgets/{YEAR}/approve/"
DRAFT = ("draft", "", 0, AMOUNT)


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in response.context["messages"]]


def test_url_names_match_the_paths():
    assert reverse("budgets:budgets", args=["maple-court"]) == BUDGETS_URL
    assert reverse("budgets:approve", args=["maple-court", str(YEAR)]) == APPROVE_URL


def test_the_page_lists_the_budgets_with_a_button_for_staff_who_may_approve(
    client, alice, viewer, budget
):
    client.force_login(alice)
    row = client.get(BUDGETS_URL).content.decode().split('data-testid="budget-2027"')[1]
    assert "$120,000.00" in row and "Draft" in row
    assert f'action="{APPROVE_URL}"' in row

    client.force_login(viewer)
    assert f'action="{APPROVE_URL}"' not in client.get(BUDGETS_URL).content.decode()


def test_approve_redirects_303_to_the_budgets_with_a_message(alice_client, budget, board):
    response = alice_client.post(APPROVE_URL, follow=True)

    assert response.redirect_chain == [(BUDGETS_URL, 303)]
    assert messages_of(response) == [
        ("success", "Approved the 2027 budget of Maple Court ($120,000.00).")
    ]
    assert state_of(budget)[:3] == ("approved", "alice", 1)
    event = FenceEvent.objects.get()
    assert (event.outcome, event.actor, event.ip) == ("committed", "alice", "127.0.0.1")
    assert len(board.received) == 1


def test_a_repeated_post_is_already_approved_at_the_info_level(alice_client, budget, board):
    alice_client.post(APPROVE_URL, follow=True)  # its message shown
    response = alice_client.post(APPROVE_URL, follow=True)

    assert response.redirect_chain == [(BUDGETS_URL, 303)]
    [(level, message)] = messages_of(response)
    assert (level, message) == (
        "info",
        "The 2027 budget of Maple Court was already approved ($120,000.00).",
    )
    assert len(board.received) == 1


def test_a_busy_budget_answers_409_naming_the_staff_member_holding_it(
    alice_client, maple, budget, board, alice
):
    with FenceLock().acquire(
        budget_resource(maple, YEAR), ttl=timedelta(seconds=30), holder="alice"
    ):
        response = alice_client.post(APPROVE_URL)

    assert response.status_code == 409
    assert (
        "Another staff member (alice) is approving the 2027 budget of Maple Court"
        in response.content.decode()
    )
    assert state_of(budget) == DRAFT and board.received == []


@pytest.mark.parametrize(
    ("year", "says"),
    [
        ("27", '"27" is not a year: use four digits, e.g. 2027.'),
        ("0000", '"0000" is not a year'),
        ("2031", "Maple Court has no budget for 2031 to approve."),
    ],
)
def test_a_bad_year_or_one_without_a_budget_answers_400(alice_client, budget, board, year, says):
    response = alice_client.post(f"{BUDGETS_URL}{year}/approve/")

    assert response.status_code == 400
    assert says in html.unescape(response.content.decode())
    assert state_of(budget) == DRAFT and not FenceEvent.objects.exists()


def test_staff_without_the_permission_get_403_and_another_association_404(
    client, viewer, mallory, budget, board
):
    client.force_login(viewer)
    assert client.post(APPROVE_URL).status_code == 403
    client.force_login(mallory)
    assert client.post(APPROVE_URL).status_code == 404

    assert state_of(budget) == DRAFT and board.received == []
    denials = AccessDenial.objects.order_by("id").values_list("actor", "reason", "operation")
    assert list(denials) == [
        ("viewer", "permission", "budget-approval"),
        ("mallory", "tenant", "budget-approval"),
    ]


def test_redis_down_answers_503_and_a_failed_notification_502(
    alice_client, budget, board, settings
):
    board.status = 422
    failed = alice_client.post(APPROVE_URL)
    settings.LOCK_REDIS_URL = dead_redis_url()
    down = alice_client.post(APPROVE_URL)

    assert failed.status_code == 502
    assert "the board did not accept it (HTTP 422)" in failed.content.decode()
    assert down.status_code == 503
    assert state_of(budget) == DRAFT


# -- the budgets' admin ------------------------------------------------------------------------


def test_a_draft_approved_while_its_admin_form_was_open_is_not_changed(
    alice_client, maple, budget, alice
):
    change_url = f"/admin/budgets/annualbudget/{budget.pk}/change/"
    alice.user_permissions.add(Permission.objects.get(codename="change_annualbudget"))
    assert alice_client.get(change_url).status_code == 200  # the form, opened on the draft
    approve_budget(organization=maple, year=YEAR, actor=None, via="cron")

    saved = alice_client.post(change_url, {"organization": maple.pk, "year": YEAR, "amount": "1"})

    assert saved.status_code == 403
    assert AnnualBudget.objects.get(pk=budget.pk).amount == AMOUNT


def test_saving_a_draft_that_was_approved_since_it_was_read_is_refused(maple, budget, alice):
    """Past the permission check: the form was built from a draft, and the approval commits
    before the save. The save's row lock settles it (the approval's fence takes it too)."""
    budget_admin = admin.site._registry[AnnualBudget]
    request = RequestFactory().post("/")
    request.user = alice
    stale = AnnualBudget.objects.get(pk=budget.pk)  # read as a draft
    stale.amount = AMOUNT + 1
    approve_budget(organization=maple, year=YEAR, actor=None, via="cron")

    with pytest.raises(PermissionDenied), transaction.atomic():
        budget_admin.save_model(request, stale, SimpleNamespace(changed_data=["amount"]), True)

    assert state_of(budget) == ("approved", "cron", 1, AMOUNT)
