"""Sessions in Redis with the database behind them (hoa/sessions.py)."""

import pytest
from django.contrib.sessions.models import Session
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from hoa.sessions import SessionStore

pytestmark = pytest.mark.django_db

LOGIN_URL = "/accounts/login/"
LOGOUT_URL = "/accounts/logout/"
HOME_PAGE = "/orgs/maple-court/"


def sign_in(client: Client, username: str, password: str):
    return client.post(LOGIN_URL, {"username": username, "password": password})


def session_key(client: Client) -> str:
    return client.cookies["sessionid"].value


def cached_copy(key: str):
    return cache.get(SessionStore.cache_key_prefix + key)


def test_a_signed_in_request_reads_its_session_from_the_cache_not_the_database(alice):
    client = Client()
    assert sign_in(client, "alice", "pw-alice").status_code == 302

    with CaptureQueriesContext(connection) as queries:
        page = client.get(HOME_PAGE)

    assert page.status_code == 200
    assert not [q["sql"] for q in queries if "django_session" in q["sql"]]


def test_the_cached_copy_lives_at_most_session_cache_seconds(settings, alice):
    settings.SESSION_CACHE_SECONDS = 7
    client = Client()
    sign_in(client, "alice", "pw-alice")

    ttl = cache.ttl(SessionStore.cache_key_prefix + session_key(client))

    assert 0 < ttl <= 7
    assert Session.objects.get(pk=session_key(client)).get_decoded()["_auth_user_id"]


def test_a_session_the_cache_lost_is_read_from_the_database_and_cached_again(alice):
    client = Client()
    sign_in(client, "alice", "pw-alice")
    key = session_key(client)
    cache.delete(SessionStore.cache_key_prefix + key)

    page = client.get(HOME_PAGE)

    assert page.status_code == 200
    assert cached_copy(key)["_auth_user_id"] == str(alice.pk)


def test_signing_out_ends_the_session_in_the_database_and_the_cache(alice):
    client = Client()
    sign_in(client, "alice", "pw-alice")
    key = session_key(client)
    stolen = Client()
    stolen.cookies["sessionid"] = key

    assert client.post(LOGOUT_URL).status_code == 302  # signed out, to the sign-in page

    assert not Session.objects.filter(pk=key).exists()
    assert cached_copy(key) is None
    assert stolen.get(HOME_PAGE).status_code == 302  # to the sign-in page


def test_a_password_change_ends_the_other_sessions(alice):
    elsewhere = Client()
    sign_in(elsewhere, "alice", "pw-alice")
    assert elsewhere.get(HOME_PAGE).status_code == 200
    alice.set_password("a new long passphrase")
    alice.save()

    assert elsewhere.get(HOME_PAGE).status_code == 302


def test_sign_in_and_sign_out_work_while_the_cache_is_down(dead_cache, alice):
    client = Client()

    assert sign_in(client, "alice", "pw-alice").status_code == 302
    key = session_key(client)
    assert client.get(HOME_PAGE).status_code == 200  # read from the database
    assert client.post(LOGOUT_URL).status_code == 302  # signed out, to the sign-in page
    assert not Session.objects.filter(pk=key).exists()
