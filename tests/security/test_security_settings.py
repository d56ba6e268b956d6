"""Production settings: check --deploy, the refusal to start without a secret, cookies,
HSTS, the Content-Security-Policy, pages that need nothing inline, password validators."""

import os
import re
from datetime import date
from pathlib import Path

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client

from charges.models import MonthlyChargeRun
from hoa.models import Complaint
from locking.models import FenceEvent
from tests.harness.processes import BASE_DIR, run_manage

DOCS = (BASE_DIR / "docs" / "security.md").read_text()
TEMPLATE_DIRS = [
    BASE_DIR / "templates",
    BASE_DIR / "hoa" / "templates",
    BASE_DIR / "charges" / "templates",
    BASE_DIR / "vendors" / "templates",
]
EXPECTED_CSP = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}
# Markup a strict CSP would block: inline scripts, style elements and attributes, handlers.
INLINE = re.compile(
    r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>"
    r"|<style\b|\sstyle=|\son[a-z]+=|javascript:",
    re.IGNORECASE,
)


def policy(response) -> dict[str, str]:
    """The Content-Security-Policy header as {directive: sources}."""
    header = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


def production_env(**overrides) -> dict[str, str]:
    """The environment of a production process: DEBUG off, nothing relaxed for tests."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"SECURE_SSL_REDIRECT", "STATIC_MANIFEST", "DEBUG", "SECRET_KEY"}
    }
    env.update(
        DEBUG="0",
        SECRET_KEY="a-production-grade-secret-" + "k3y!" * 16,
        ALLOWED_HOSTS="hoa.example.org",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return {name: value for name, value in env.items() if value is not None}


def test_check_deploy_warns_only_about_what_docs_security_explains():
    # Without a payment service, check --deploy fails (vendors.E001: tests/test_payments_*).
    env = production_env(VENDOR_PAYMENT_URL="https://payments.example.org/pay")
    result = run_manage("check", "--deploy", env=env)

    assert result.returncode == 0, result.stderr
    warned = set(re.findall(r"\(([a-z_.]+\.W\d{3})\)", result.stdout + result.stderr))
    assert warned == {"security.W021"}
    assert "ERRORS" not in result.stdout + result.stderr
    for warning in warned:
        assert f"`{warning}`" in DOCS


def test_production_refuses_to_start_without_a_secret_key():
    result = run_manage("check", env=production_env(SECRET_KEY=None))

    assert result.returncode == 1
    assert result.stderr.startswith("Configuration error: SECRET_KEY is not set.")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FENCED_POST_RATE", "thirty"),
        ("LOGIN_RATE", "10/0m"),
        ("LOGIN_LOCKOUT_RATE", "0/15m"),
        ("FENCED_POST_IP_RATE", "5/week"),
    ],
)
def test_a_malformed_rate_is_a_one_line_configuration_error(name, value):
    result = run_manage("check", env=production_env(**{name: value}))

    assert result.returncode == 1
    assert result.stderr == (
        f"Configuration error: {name} must be a rate like 30/m or 5/15m, got {value!r}\n"
    )


@pytest.mark.django_db
def test_pages_carry_the_strict_policy_and_the_other_security_headers(alice):
    client = Client()
    client.force_login(alice)

    response = client.get("/orgs/maple-court/", secure=True)

    assert response.status_code == 200
    assert policy(response) == EXPECTED_CSP
    assert response["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


@pytest.mark.django_db
def test_error_pages_carry_the_policy_too(alice):
    client = Client()
    client.force_login(alice)

    for status, response in [
        (404, client.get("/orgs/oak-ridge/")),
        (405, client.put("/orgs/maple-court/charges/2026-03/generate/")),
        (403, Client(enforce_csrf_checks=True).post("/accounts/login/")),
    ]:
        assert response.status_code == status
        assert policy(response) == EXPECTED_CSP


@pytest.mark.django_db
def test_session_and_csrf_cookies_are_secure_and_http_only(alice):
    client = Client()
    login_page = client.get("/accounts/login/")
    token = login_page.cookies["csrftoken"].value

    response = client.post(
        "/accounts/login/",
        {"username": "alice", "password": "pw-alice", "csrfmiddlewaretoken": token},
    )

    assert response.status_code == 302
    for name in ("sessionid", "csrftoken"):
        cookie = client.cookies[name]
        assert cookie["secure"] is True, name
        assert cookie["httponly"] is True, name
        assert cookie["samesite"] == "Lax", name


def test_templates_need_nothing_inline():
    offending = [
        f"{path.relative_to(BASE_DIR)}: {match.group(0)}"
        for directory in TEMPLATE_DIRS
        for path in sorted(Path(directory).rglob("*.html"))
        for match in INLINE.finditer(path.read_text())
    ]

    assert offending == []


@pytest.mark.django_db
def test_rendered_pages_with_charts_and_timelines_need_nothing_inline(olivia, maple):
    MonthlyChargeRun.objects.create(organization=maple, month=date(2026, 3, 1))
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    resource = f"monthly-charges:org:{maple.pk}:2026-03"
    FenceEvent.objects.create(
        resource=resource, scope=f"org:{maple.pk}", outcome="committed", token=3, actor="olivia"
    )
    client = Client()
    client.force_login(olivia)

    pages = [
        "/orgs/",
        "/orgs/maple-court/",
        "/orgs/maple-court/charges/",
        "/orgs/maple-court/charges/2026-03/",
        "/orgs/maple-court/complaints/",
        f"/orgs/maple-court/complaints/{complaint.pk}/",
        "/orgs/maple-court/vendors/",
        f"/ops/locks/?resource={resource}",
        "/accounts/login/",
    ]
    found = {}
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        found[page] = INLINE.findall(response.content.decode())

    assert found == {page: [] for page in pages}
    assert '<svg class="chart' in client.get("/orgs/maple-court/").content.decode()


def test_htmx_is_told_not_to_inject_styles_or_evaluate_attributes():
    base = (BASE_DIR / "templates" / "base.html").read_text()

    assert '"includeIndicatorStyles": false' in base
    assert '"allowEval": false' in base


def test_password_validators_refuse_weak_passwords():
    for weak in ("password", "12345678", "short"):
        with pytest.raises(ValidationError):
            validate_password(weak)
    validate_password("correct horse battery staple 2026")
