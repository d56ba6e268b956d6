"""Abuse limits: fenced POSTs per user and per address, sign-ins per address, the lockout
after repeated failures; the 429 page; limits off for load tests; a cache outage fails open.

Rates in these tests are per day: django-ratelimit counts in fixed windows, and a test
that straddled the edge of a one-minute window would see its count start again.
"""

import re
from datetime import date

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client

from charges.models import MonthlyChargeRun
from hoa.models import AccessDenial
from locking.models import FenceEvent

GENERATE_URL = "/orgs/maple-court/charges/{month}/generate/"
LOGIN_URL = "/accounts/login/"
ADMIN_LOGIN_URL = "/admin/login/"
HOME = "203.0.113.10"
ELSEWHERE = "198.51.100.20"


def generate(client, month="2026-03", address=HOME):
    # Confirmed, as the page's button does: the months here are not this one or the next.
    return client.post(GENERATE_URL.format(month=month), {"confirm": "yes"}, REMOTE_ADDR=address)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def sign_in(client, username, password, *, url=LOGIN_URL, address=HOME):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def assert_429(response, *, says: str) -> None:
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 86400
    page = response.content.decode()
    assert "Too many requests" in page
    assert says in page


def rate_limit_denials() -> list[tuple[str, str]]:
    return list(
        AccessDenial.objects.filter(reason="rate_limit").order_by("pk").values_list("actor", "ip")
    )


# -- fenced POSTs ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_fenced_posts_past_the_users_limit_answer_429_and_start_nothing(settings, alice, root):
    settings.FENCED_POST_RATE = "3/d"
    alice_client = logged_in(alice)

    answers = [generate(alice_client, month=f"2026-0{n}").status_code for n in (1, 2, 3)]
    events_before = FenceEvent.objects.count()
    refused = generate(alice_client, month="2026-04")

    assert answers == [303, 303, 303]
    assert_429(refused, says="nothing was done")
    assert FenceEvent.objects.count() == events_before == 3  # no lease was even asked for
    assert not MonthlyChargeRun.objects.filter(month="2026-04-01").exists()
    assert rate_limit_denials() == [("alice", HOME)]
    # The limit is Alice's: another user from the same address goes on.
    assert generate(logged_in(root), month="2026-04").status_code == 303


@pytest.mark.django_db
def test_refused_posts_count_too_so_probing_is_limited(settings, viewer, mallory):
    settings.FENCED_POST_RATE = "2/d"
    viewer_client, mallory_client = logged_in(viewer), logged_in(mallory)

    assert [generate(viewer_client).status_code for _ in range(3)] == [403, 403, 429]
    assert [generate(mallory_client).status_code for _ in range(3)] == [404, 404, 429]


@pytest.mark.django_db
def test_fenced_posts_past_the_addresss_limit_answer_429_whoever_asks(settings, viewer, mallory):
    settings.FENCED_POST_RATE = "100/d"
    settings.FENCED_POST_IP_RATE = "2/d"

    first = generate(logged_in(viewer))
    second = generate(logged_in(mallory))
    third = generate(logged_in(mallory))
    from_elsewhere = generate(logged_in(mallory), address=ELSEWHERE)

    assert [first.status_code, second.status_code, third.status_code] == [403, 404, 429]
    assert from_elsewhere.status_code == 404


@pytest.mark.django_db(transaction=True)
def test_admin_actions_share_the_users_fenced_post_budget(settings, alice, maple):
    settings.FENCED_POST_RATE = "1/d"
    client = logged_in(alice)

    page = generate(client)
    action = client.post(
        "/admin/hoa/organization/",
        {
            "action": "generate_charges_for_month",
            ACTION_CHECKBOX_NAME: [maple.pk],
            "month": "2026-05",
            "apply": "Generate",
            "confirm": "on",
        },
        REMOTE_ADDR=HOME,
    )

    assert page.status_code == 303
    assert_429(action, says="Try again in")
    assert list(MonthlyChargeRun.objects.values_list("month", flat=True)) == [date(2026, 3, 1)]


@pytest.mark.django_db
def test_limits_are_off_when_disabled_for_load_tests(settings, viewer):
    settings.RATELIMIT_ENABLE = False
    settings.FENCED_POST_RATE = "1/d"
    client = logged_in(viewer)

    assert {generate(client).status_code for _ in range(5)} == {403}


# -- sign-in ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_sign_ins_past_the_addresss_limit_answer_429(settings, alice):
    settings.LOGIN_RATE = "3/d"
    client = Client()

    answers = [sign_in(client, f"guess{n}", "wrong").status_code for n in range(3)]
    refused = sign_in(client, "alice", "pw-alice")

    assert answers == [200, 200, 200]  # the form again, with its error
    assert_429(refused, says="Too many sign-in attempts from your address")
    assert "_auth_user_id" not in client.session
    assert client.get(LOGIN_URL, REMOTE_ADDR=HOME).status_code == 200  # reading is free
    assert sign_in(Client(), "alice", "pw-alice", address=ELSEWHERE).status_code == 302
    assert rate_limit_denials() == [("anonymous", HOME)]


@pytest.mark.django_db
@pytest.mark.parametrize("url", [LOGIN_URL, ADMIN_LOGIN_URL])
def test_repeated_failures_lock_the_username_at_that_address_even_with_the_right_password(
    settings, alice, url
):
    settings.LOGIN_LOCKOUT_RATE = "3/d"
    client = Client()

    failures = [sign_in(client, "alice", "wrong", url=url).status_code for _ in range(3)]
    locked = sign_in(client, "alice", "pw-alice", url=url)

    assert failures == [200, 200, 200]
    assert_429(locked, says="Sign-in for this account is locked after too many failed attempts")
    assert re.search(r"Try again in \d+ minutes", locked.content.decode())
    assert "_auth_user_id" not in client.session
    # Nobody can lock Alice out from elsewhere, and the lock is Alice's only.
    assert sign_in(Client(), "alice", "pw-alice", url=url, address=ELSEWHERE).status_code == 302
    assert sign_in(Client(), "ALICE", "wrong", url=url).status_code == 429  # same name
    assert sign_in(Client(), "bob", "wrong", url=url).status_code == 200


@pytest.mark.django_db
def test_the_site_and_admin_login_count_failures_together(settings, alice):
    settings.LOGIN_LOCKOUT_RATE = "2/d"

    sign_in(Client(), "alice", "wrong", url=LOGIN_URL)
    sign_in(Client(), "alice", "wrong", url=ADMIN_LOGIN_URL)

    assert sign_in(Client(), "alice", "pw-alice", url=LOGIN_URL).status_code == 429
    assert sign_in(Client(), "alice", "pw-alice", url=ADMIN_LOGIN_URL).status_code == 429


@pytest.mark.django_db
def test_a_correct_sign_in_below_the_limits_works_as_before(alice):
    response = sign_in(Client(), "alice", "pw-alice")

    assert response.status_code == 302
    assert response["Location"] == "/"


# -- the audit of refusals is bounded --------------------------------------------------------


@pytest.mark.django_db
def test_a_flood_of_refusals_is_written_only_up_to_the_audit_budget(settings, mallory, maple):
    settings.AUDIT_DENIAL_RATE = "3/d"
    client = logged_in(mallory)

    answers = {client.get("/orgs/maple-court/", REMOTE_ADDR=HOME).status_code for _ in range(6)}
    other = client.get("/orgs/maple-court/", REMOTE_ADDR=ELSEWHERE)

    assert answers == {404}
    assert other.status_code == 404
    assert list(AccessDenial.objects.values_list("ip", flat=True)) == [ELSEWHERE] + [HOME] * 3


# -- a cache outage --------------------------------------------------------------------------


@pytest.mark.django_db
def test_sign_in_and_refusals_still_work_when_the_cache_is_down(dead_cache, alice, mallory, maple):
    signed_in = sign_in(Client(), "alice", "pw-alice")
    refused = logged_in(mallory).post(GENERATE_URL.format(month="2026-03"), REMOTE_ADDR=HOME)

    assert signed_in.status_code == 302
    assert refused.status_code == 404
    assert list(AccessDenial.objects.values_list("reason", "actor")) == [("tenant", "mallory")]


@pytest.mark.django_db(transaction=True)
def test_fenced_posts_go_through_when_only_the_cache_is_down(dead_cache, alice):
    # The lock Redis (LOCK_REDIS_URL) is up; the cache that holds the counters is not.
    response = generate(logged_in(alice))

    assert response.status_code == 303
    assert MonthlyChargeRun.objects.get().is_completed


@pytest.mark.django_db
def test_behind_a_proxy_the_configured_header_tells_clients_apart(settings, mallory, maple):
    settings.CLIENT_IP_HEADER = "X-Real-IP"
    settings.LOGIN_RATE = "2/d"
    proxy = "127.0.0.1"  # every request reaches the app from the proxy

    def attempt(real_ip=None):
        headers = {"x-real-ip": real_ip} if real_ip else {}
        return Client().post(
            LOGIN_URL, {"username": "x", "password": "y"}, REMOTE_ADDR=proxy, headers=headers
        )

    first_client = [attempt(HOME).status_code for _ in range(3)]
    second_client = attempt(ELSEWHERE).status_code
    logged_in(mallory).get("/orgs/maple-court/", REMOTE_ADDR=proxy, headers={"x-real-ip": HOME})
    not_through_the_proxy = [attempt().status_code for _ in range(3)]

    assert first_client == [200, 200, 429]
    assert second_client == 200
    assert not_through_the_proxy == [200, 200, 429]  # known by REMOTE_ADDR
    assert list(AccessDenial.objects.order_by("pk").values_list("reason", "actor", "ip")) == [
        ("rate_limit", "anonymous", HOME),
        ("tenant", "mallory", HOME),
        ("rate_limit", "anonymous", proxy),
    ]
