"""Password reset by email, end to end through a real SMTP server, and the pages that say
so when email is not set up or the mail server refuses.

The SMTP server is aiosmtpd on a free loopback port, started by the test; the site is
pointed at it with the settings an ``EMAIL_URL`` of ``smtp://127.0.0.1:<port>`` gives
(``hoa.settings.email_settings``). Nothing of the mail path is mocked.
"""

import json
import re
import sys

import pytest

from hoa.settings import email_settings
from tests.harness.net import LOOPBACK, closed_port
from tests.harness.processes import run_child
from tests.harness.smtp import MailServer

RESET_URL = "/accounts/password_reset/"
NEW_PASSWORD = "a-fresh-garden-hose-42"


@pytest.fixture
def smtp_server():
    server = MailServer().start()
    try:
        yield server.controller, server.mailbox
    finally:
        server.stop()


def use_email_url(settings, url: str) -> None:
    """What ``EMAIL_URL=<url>`` sets, on the running test's settings."""
    for name, value in email_settings(url).items():
        setattr(settings, name, value)
    settings.EMAIL_CONFIGURED = True
    settings.DEFAULT_FROM_EMAIL = "Maple Court HOA <hoa@maple.example>"


@pytest.fixture
def alice_with_email(alice):
    alice.email = "alice@maple.example"
    alice.save()
    return alice


def test_a_reset_mail_travels_through_a_real_smtp_server_and_its_link_changes_the_password(
    client, settings, smtp_server, alice_with_email
):
    controller, mailbox = smtp_server
    use_email_url(settings, f"smtp://{controller.hostname}:{controller.port}")

    response = client.post(RESET_URL, {"email": "alice@maple.example"})

    assert response.status_code == 302
    assert response["Location"] == "/accounts/password_reset/done/"
    [message] = mailbox.messages
    assert mailbox.recipients == [["alice@maple.example"]]
    assert message["From"] == "Maple Court HOA <hoa@maple.example>"
    assert message["To"] == "alice@maple.example"
    body = message.get_payload(decode=True).decode()
    assert "Hello alice," in body
    [link] = re.findall(r"http://testserver(/accounts/reset/[^/\s]+/[^/\s]+/)", body)

    confirm = client.get(link)
    assert confirm.status_code == 302  # Django hides the token behind a session redirect
    form_url = confirm["Location"]
    assert form_url.endswith("/set-password/")
    assert client.get(form_url).status_code == 200
    done = client.post(form_url, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert done.status_code == 302
    assert done["Location"] == "/accounts/reset/done/"
    assert "Password changed" in client.get(done["Location"]).content.decode()

    login = client.post("/accounts/login/", {"username": "alice", "password": NEW_PASSWORD})
    assert login.status_code == 302
    assert client.session["_auth_user_id"] == str(alice_with_email.pk)
    # The link worked once.
    assert "This reset link is not valid" in client.get(link, follow=True).content.decode()
    alice_with_email.refresh_from_db()
    assert not alice_with_email.check_password("pw-alice")


def test_an_address_without_an_account_gets_the_same_page_and_no_mail(
    client, settings, smtp_server, alice_with_email
):
    controller, mailbox = smtp_server
    use_email_url(settings, f"smtp://{controller.hostname}:{controller.port}")

    response = client.post(RESET_URL, {"email": "nobody@elsewhere.example"})

    assert response.status_code == 302
    assert response["Location"] == "/accounts/password_reset/done/"
    assert mailbox.messages == []


@pytest.mark.parametrize("email", ["alice@maple.example", "nobody@elsewhere.example"])
def test_a_mail_server_that_refuses_the_connection_is_reported_not_hidden(
    client, settings, alice_with_email, email
):
    use_email_url(settings, f"smtp://{LOOPBACK}:{closed_port()}")

    response = client.post(RESET_URL, {"email": email})

    # The same answer whether or not the address has an account: the connection is tried
    # before any account is looked up.
    assert response.status_code == 502
    page = response.content.decode()
    assert "The reset email could not be sent" in page
    assert "no reset link was sent" in page
    assert "Check your email" not in page


def test_production_without_email_says_reset_is_not_available(client, settings, alice_with_email):
    settings.EMAIL_CONFIGURED = False

    shown = client.get(RESET_URL)
    posted = client.post(RESET_URL, {"email": "alice@maple.example"})

    for response in (shown, posted):
        assert response.status_code == 503
        page = response.content.decode()
        assert "Password reset is not available" in page
        assert "Ask an administrator to reset your password." in page
        assert 'name="email"' not in page


def test_the_login_page_links_to_the_reset_form(client):
    page = client.get("/accounts/login/").content.decode()

    assert f'href="{RESET_URL}"' in page


def test_reset_requests_from_one_address_are_limited(client, settings, smtp_server, db):
    controller, _mailbox = smtp_server
    use_email_url(settings, f"smtp://{controller.hostname}:{controller.port}")
    settings.PASSWORD_RESET_RATE = "2/m"

    answers = [client.post(RESET_URL, {"email": "x@example.org"}).status_code for _ in range(3)]

    assert answers == [302, 302, 429]


# -- EMAIL_URL and friends, read by hoa.settings in a fresh process --------------------------

SHOW_EMAIL_SETTINGS = (
    "import json, hoa.settings as s; print(json.dumps({name: getattr(s, name) for name in "
    "('EMAIL_BACKEND', 'EMAIL_HOST', 'EMAIL_PORT', 'EMAIL_HOST_USER', 'EMAIL_HOST_PASSWORD', "
    "'EMAIL_USE_TLS', 'EMAIL_USE_SSL', 'EMAIL_TIMEOUT', 'EMAIL_CONFIGURED', "
    "'DEFAULT_FROM_EMAIL')}))"
)


def settings_in_a_child(**env):
    base = {
        "PATH": "/usr/bin:/bin",
        "SECRET_KEY": "a-production-grade-secret-" + "k3y!" * 16,
        "DEBUG": "0",
    }
    return run_child([sys.executable, "-c", SHOW_EMAIL_SETTINGS], env={**base, **env})


def test_email_url_sets_the_smtp_server_its_login_and_tls():
    child = settings_in_a_child(
        EMAIL_URL="smtp://mailer:p%40ss@mail.example.org:587/?tls=True",
        DEFAULT_FROM_EMAIL="Maple Court HOA <hoa@maple.example>",
    )

    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "mail.example.org",
        "EMAIL_PORT": 587,
        "EMAIL_HOST_USER": "mailer",
        "EMAIL_HOST_PASSWORD": "p@ss",
        "EMAIL_USE_TLS": True,
        "EMAIL_USE_SSL": False,
        "EMAIL_TIMEOUT": 10,
        "EMAIL_CONFIGURED": True,
        "DEFAULT_FROM_EMAIL": "Maple Court HOA <hoa@maple.example>",
    }


def test_development_prints_mail_on_the_console_and_production_has_none():
    development = json.loads(settings_in_a_child(DEBUG="1").stdout)
    production = json.loads(settings_in_a_child().stdout)

    assert development["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"
    assert development["EMAIL_CONFIGURED"] is True
    assert production["EMAIL_CONFIGURED"] is False


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"EMAIL_URL": "smtp://u:secret@mail.example.org:notaport/"}, "not a valid email URL"),
        ({"EMAIL_URL": "mailto://u:secret@mail.example.org/"}, "EMAIL_URL must start with"),
        ({"EMAIL_URL": "smtp://u:secret@mail.example.org:587/"}, "DEFAULT_FROM_EMAIL is not"),
    ],
    ids=["bad-port", "unknown-scheme", "no-sender"],
)
def test_a_bad_email_configuration_stops_the_start_with_one_clear_line(env, said):
    child = settings_in_a_child(**env)

    assert child.returncode == 1
    last = child.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: ")
    assert said in last
    assert "secret" not in child.stderr  # the password in the URL is never repeated
