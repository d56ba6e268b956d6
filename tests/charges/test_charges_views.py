"""The staff pages: runs by month with a chart, one run, and the generate button."""

import re
import socket
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.operations import charge_resource
from charges.selectors import add_months, current_month
from charges.services import generate_monthly_charges
from locking import FenceLock
from locking.models import FenceEvent
from tests.charges_support import (
    MONTH,
    MONTH_ARG,
    Worker,
    dead_redis_url,
    wait_for_lease_expiry,
)

pytestmark = pytest.mark.django_db(transaction=True)

GENERATE_URL = f"/orgs/maple-court/charges/{MONTH_ARG}/generate/"
# MONTH is neither this month nor the next: the button posts again with this.
CONFIRMED = {"confirm": "yes"}
RUN_URL = f"/orgs/maple-court/charges/{MONTH_ARG}/"
RUNS_URL = "/orgs/maple-court/charges/"


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def assert_nothing_written():
    assert not MonthlyChargeRun.objects.exists()
    assert not MonthlyCharge.objects.exists()


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in response.context["messages"]]


def test_url_names_match_the_paths():
    assert reverse("charges:runs", args=["maple-court"]) == RUNS_URL
    assert reverse("charges:run", args=["maple-court", MONTH_ARG]) == RUN_URL
    assert reverse("charges:generate", args=["maple-court", MONTH_ARG]) == GENERATE_URL


def test_generate_redirects_303_to_the_run_page_with_a_message(alice_client, billing, maple):
    response = alice_client.post(GENERATE_URL, CONFIRMED, follow=True)

    assert response.redirect_chain == [(RUN_URL, 303)]
    [(level, message)] = messages_of(response)
    assert level == "success"
    assert message.startswith("Generated 10 charges for Maple Court, March 2026")
    page = response.content.decode()
    assert page.count("<tr><td>M0") == 10  # one row per unit
    assert 'class="token"' not in page  # the fencing token is the operators' to read
    run = MonthlyChargeRun.objects.get(organization=maple, month=MONTH)
    assert (run.completed_by, run.charge_count) == ("alice", 10)
    event = FenceEvent.objects.get()
    assert (event.outcome, event.actor, event.ip) == ("committed", "alice", "127.0.0.1")


def test_repeated_post_redirects_with_already_generated_and_writes_nothing_more(
    alice_client, billing
):
    alice_client.post(
        GENERATE_URL, CONFIRMED, follow=True
    )  # shows (and so consumes) its own message
    response = alice_client.post(GENERATE_URL, CONFIRMED, follow=True)

    assert response.redirect_chain == [(RUN_URL, 303)]
    [(level, message)] = messages_of(response)
    assert level == "info"
    assert message.startswith("Charges for Maple Court, March 2026 were already generated")
    assert MonthlyCharge.objects.count() == 10
    assert len(billing.received) == 1


def test_run_list_shows_the_runs_and_one_bar_per_month_of_the_last_year(
    alice_client, billing, maple
):
    this_month = current_month()
    generate_monthly_charges(organization=maple, month=this_month, actor=None, via="cron")
    generate_monthly_charges(
        organization=maple, month=add_months(this_month, -2), actor=None, via="cron"
    )

    page = alice_client.get(RUNS_URL).content.decode()

    svg = page.split("<svg")[1].split("</svg>")[0]
    months = re.findall(r"<title>([A-Z][a-z]+ \d{4}): \$[\d,.]+</title>", svg)
    heights = [float(h) for h in re.findall(r'<rect class="bar[^"]*"[^>]* height="([\d.]+)"', svg)]
    assert months == [f"{add_months(this_month, n):%B %Y}" for n in range(-11, 1)]
    assert len(heights) == 12
    assert heights[-1] == heights[-3] > 0  # the two generated months, equal totals
    assert heights.count(0) == 10
    assert page.count(f'href="/orgs/maple-court/charges/{this_month:%Y-%m}/"') >= 1
    # This month is done, so the page offers no button for it, only the month picker.
    assert f"/charges/{this_month:%Y-%m}/generate/" not in page
    assert 'type="month"' in page


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
def test_run_list_offers_generating_the_current_month(alice_client):
    page = alice_client.get(RUNS_URL).content.decode()
    assert f'action="/orgs/maple-court/charges/{current_month():%Y-%m}/generate/"' in page


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
def test_month_picker_leads_to_the_month_page_with_its_button(alice_client):
    response = alice_client.get(RUNS_URL, {"month": MONTH_ARG}, follow=True)

    assert response.redirect_chain == [(RUN_URL, 302)]
    page = response.content.decode()
    assert "have not been generated" in page
    assert f'action="{GENERATE_URL}"' in page
    assert_nothing_written()


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
def test_viewer_without_permission_sees_runs_but_no_generate_button(client, viewer):
    client.force_login(viewer)
    for url in (RUNS_URL, RUN_URL):
        response = client.get(url)
        assert response.status_code == 200
        assert "/generate/" not in response.content.decode()


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("post", "/orgs/maple-court/charges/2026-13/generate/"),
        ("post", "/orgs/maple-court/charges/march/generate/"),
        ("get", "/orgs/maple-court/charges/2026-13/"),
        ("get", "/orgs/maple-court/charges/?month=2026-13"),
    ],
)
def test_malformed_month_answers_400_and_writes_nothing(alice_client, billing, method, url):
    response = getattr(alice_client, method)(url)

    assert response.status_code == 400
    assert "is not a month" in response.content.decode()
    assert_nothing_written()
    assert billing.received == []


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
@pytest.mark.parametrize(
    ("persona", "url", "status"),
    [
        (None, GENERATE_URL, 302),  # to the login page
        ("nobody", GENERATE_URL, 404),
        ("mallory", GENERATE_URL, 404),  # staff of another association: not told it exists
        ("alice", "/orgs/no-such-org/charges/2026-03/generate/", 404),
        ("viewer", GENERATE_URL, 403),  # member without the permission
    ],
)
def test_generate_is_refused_to_outsiders_and_writes_nothing(
    request, client, billing, maple, persona, url, status
):
    if persona:
        client.force_login(request.getfixturevalue(persona))
    response = client.post(url)

    assert response.status_code == status
    if status == 302:
        assert response["Location"].startswith("/accounts/login/")
    assert_nothing_written()
    assert billing.received == []


def test_superuser_may_generate_for_any_organization(client, root, billing, maple):
    client.force_login(root)
    assert client.post(GENERATE_URL, CONFIRMED).status_code == 303
    assert MonthlyChargeRun.objects.get().completed_by == "root"


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
def test_post_without_csrf_token_is_refused(alice, billing):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(GENERATE_URL, CONFIRMED).status_code == 403
    assert_nothing_written()


@pytest.mark.django_db  # no fenced call: a rolled-back test transaction is enough
def test_get_on_the_generate_url_leads_to_the_months_page(alice_client):
    """Entering a 409 page's address again must not show the browser's bare 405."""
    response = alice_client.get(GENERATE_URL)
    assert (response.status_code, response["Location"]) == (302, RUN_URL)
    assert_nothing_written()


@pytest.mark.parametrize("month", ["0001-01", "1969-07", "9999-12"])
def test_a_month_outside_the_billing_window_is_refused_naming_the_range(
    alice_client, billing, settings, month
):
    settings.CHARGE_MONTHS_BACK, settings.CHARGE_MONTHS_AHEAD = 24, 3
    first, last = add_months(current_month(), -24), add_months(current_month(), 3)
    response = alice_client.post(f"/orgs/maple-court/charges/{month}/generate/", CONFIRMED)
    assert response.status_code == 400
    assert (
        f"{month} is outside the billing window: charges can be generated for "
        f"{first:%B %Y} to {last:%B %Y}." in response.content.decode()
    )
    assert_nothing_written()
    assert billing.received == []


def test_busy_answers_409_naming_the_holder_with_a_retry_button(
    alice_client, billing, maple, django_user_model
):
    django_user_model.objects.create_user(username="bob", password="pw-bob")
    FenceLock().acquire(charge_resource(maple, MONTH), ttl=timedelta(seconds=30), holder="bob")
    response = alice_client.post(GENERATE_URL, CONFIRMED)

    assert response.status_code == 409
    page = response.content.decode()
    assert (
        "Another staff member (bob) is generating the charges for Maple Court, March 2026; "
        "this usually takes a few seconds."
    ) in page
    assert f'<form method="post" action="{GENERATE_URL}"' in page
    assert ">Try again</button>" in page
    staff_text = page.replace("csrfmiddlewaretoken", "")
    host = f" on {socket.gethostname()} pid "  # as the holder label shows it (see test_pages_hoa)
    for operator_fact in ("bob on ", " pid ", host, "token", "try again in"):
        assert operator_fact not in staff_text
    assert_nothing_written()
    assert billing.received == []


def test_an_unusual_month_asks_for_confirmation_first(alice_client, billing):
    url = f"/orgs/maple-court/charges/{add_months(current_month(), -2):%Y-%m}/generate/"
    asked = alice_client.post(url)
    assert asked.status_code == 200
    page = asked.content.decode()
    assert "is neither this month nor the next" in page
    assert 'name="confirm" value="yes"' in page
    assert_nothing_written()
    assert alice_client.post(url, CONFIRMED).status_code == 303
    assert MonthlyChargeRun.objects.completed().count() == 1


@pytest.mark.parametrize("offset", [0, 1])
def test_this_month_and_the_next_need_no_confirmation(alice_client, billing, offset):
    month = add_months(current_month(), offset)
    response = alice_client.post(f"/orgs/maple-court/charges/{month:%Y-%m}/generate/")
    assert response.status_code == 303
    assert MonthlyChargeRun.objects.completed().filter(month=month).exists()


def test_an_old_months_page_prints_a_four_digit_year(alice_client):
    # Outside the billing window: no button (and its URL) any more, the month's name only.
    page = alice_client.get("/orgs/maple-court/charges/0001-01/").content.decode()
    assert "Charges of Maple Court for January 0001" in page and ">1-01<" not in page


def test_busy_by_a_worker_that_is_no_person_says_another_worker(alice_client, billing, maple):
    FenceLock().acquire(
        charge_resource(maple, MONTH), ttl=timedelta(seconds=30), holder="bob at the front desk"
    )
    response = alice_client.post(GENERATE_URL, CONFIRMED)

    assert response.status_code == 409
    page = response.content.decode()
    assert (
        "Another worker is generating the charges for Maple Court, March 2026; "
        "this usually takes a few seconds."
    ) in page
    assert "bob at the front desk" not in page
    assert_nothing_written()


def test_redis_down_answers_503_and_writes_nothing(alice_client, billing, settings):
    settings.LOCK_REDIS_URL = dead_redis_url()
    response = alice_client.post(GENERATE_URL, CONFIRMED)

    assert response.status_code == 503
    assert (
        "Generating the charges for Maple Court, March 2026 was not done: the lock service is "
        "unavailable; nothing was saved."
    ) in response.content.decode()
    assert_nothing_written()


def test_billing_failure_answers_502_and_writes_nothing(alice_client, billing):
    billing.status = 422
    response = alice_client.post(GENERATE_URL, CONFIRMED)

    assert response.status_code == 502
    assert (
        "Generating the charges for Maple Court, March 2026 failed: the billing system did not "
        "accept it (HTTP 422); nothing was saved."
    ) in response.content.decode()
    assert_nothing_written()


# Refused by the fence (billing accepted the paused call, its answer came back late) or by
# the billing service's receiver (the paused call itself arrived after the newer one's).
@pytest.mark.parametrize(
    ("answered", "refused_by"), [(True, "fence"), (False, "receiver")], ids=["fence", "receiver"]
)
def test_request_paused_past_its_lease_answers_409_stale(
    alice, billing, maple, settings, redis_client, answered, refused_by
):
    settings.CHARGES_LOCK_TTL_SECONDS = 0.3
    gate = billing.hold(lambda request: request.token == 1, answered=answered)
    client = Client()
    client.force_login(alice)
    paused = Worker(lambda: client.post(GENERATE_URL, CONFIRMED))
    gate.wait_arrived(1)
    wait_for_lease_expiry(redis_client, maple)
    generate_monthly_charges(organization=maple, month=MONTH, actor=None, via="cron")
    gate.release()
    response = paused.join().result

    assert response.status_code == 409
    page = response.content.decode()
    assert (
        "Someone else took over generating the charges for Maple Court, March 2026 while this "
        "attempt was waiting; nothing of this attempt was saved."
    ) in page
    assert "token" not in page.replace("csrfmiddlewaretoken", "")
    assert f'action="{GENERATE_URL}"' in page
    run = MonthlyChargeRun.objects.get()
    assert (run.completed_by, run.last_fence_token) == ("cron", 2)
    assert MonthlyCharge.objects.count() == 10
    [stale] = FenceEvent.objects.filter(outcome="stale")
    assert ("receiver" in stale.detail) == (refused_by == "receiver"), stale.detail
    paused_call = next(r for r in billing.received if r.token == 1)
    assert paused_call.status == (200 if refused_by == "fence" else 409)
