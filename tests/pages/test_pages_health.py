"""Health probes for load balancers: /healthz (process up) and /readyz (dependencies)."""

import pytest

from locking.connection import client_for_url
from tests.harness.net import closed_port


def test_healthz_answers_ok_without_touching_the_database(client):
    # No django_db mark: pytest-django makes any database access here an error.
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_reports_every_check_ok(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "checks": {"database": "ok", "migrations": "ok", "redis": "ok"},
    }


@pytest.mark.django_db
def test_readyz_answers_503_while_redis_is_unreachable_and_recovers_after(client, settings):
    unreachable = f"redis://127.0.0.1:{closed_port()}/8"
    try:
        # Only the lock client moves: the shared Redis keeps running for everyone else.
        settings.LOCK_REDIS_URL = unreachable
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json() == {
            "status": "not ready",
            "checks": {"database": "ok", "migrations": "ok", "redis": "error: ConnectionError"},
        }
    finally:
        settings.LOCK_REDIS_URL = settings.REDIS_URL
        # The client for the closed port is cached per URL; drop it so nothing leaks.
        client_for_url.cache_clear()
    assert client.get("/readyz").status_code == 200


def test_probes_answer_plain_http_when_https_redirects_are_on(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz").status_code == 200
    assert client.get("/orgs/").status_code == 301  # everything else goes to https
