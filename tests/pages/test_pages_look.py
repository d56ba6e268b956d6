"""The site's look at the request level: page titles that name the association, the favicon
on the staff pages and in the admin, the stylesheets that keep wide tables in their box."""

import re

import pytest


def title_of(response) -> str:
    return re.search(r"<title>(.*?)</title>", response.content.decode(), re.S).group(1).strip()


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def test_an_associations_pages_are_titled_page_association_hoa(alice_client, maple):
    assert title_of(alice_client.get(f"/orgs/{maple.slug}/")) == "Overview · Maple Court · HOA"
    charges = alice_client.get(f"/orgs/{maple.slug}/charges/")
    assert title_of(charges) == "Charges · Maple Court · HOA"
    complaints = alice_client.get(f"/orgs/{maple.slug}/complaints/")
    assert title_of(complaints) == "Complaints · Maple Court · HOA"


def test_pages_outside_an_association_are_titled_page_hoa(client, alice_client, olivia):
    assert title_of(alice_client.get("/orgs/")) == "Associations · HOA"
    client.force_login(olivia)
    assert title_of(client.get("/ops/locks/")) == "Lock status · HOA"
    client.logout()
    assert title_of(client.get("/accounts/login/")) == "Log in · HOA"


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_the_favicon_is_linked_on_the_site_and_in_the_admin(client, url, db):
    page = client.get(url).content.decode()

    assert '<link rel="icon" href="/static/hoa/favicon.svg" type="image/svg+xml">' in page


def test_the_favicon_is_served_as_svg(client):
    response = client.get("/static/hoa/favicon.svg")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("image/svg+xml")
    assert b"<svg" in b"".join(response.streaming_content)


def test_admin_pages_load_the_stylesheet_that_keeps_changelists_in_their_box(client, root):
    client.force_login(root)

    page = client.get("/admin/locking/fenceevent/").content.decode()

    assert '<link rel="stylesheet" href="/static/hoa/admin.css">' in page


@pytest.mark.parametrize("stylesheet", ["hoa/static/hoa/site.css", "hoa/static/hoa/admin.css"])
def test_no_stylesheet_breaks_words_or_hyphenates(stylesheet):
    """Words are never broken inside (issue 25, the phone): what cannot fit scrolls in its
    box. The browser walk (tests/browser/test_browser_phone.py) measures it; this names the cause.
    The one exception is a list's lead cell (issue 37): a word wider than what the other
    columns leave breaks there, its minimum width keeping ordinary words whole."""
    from pathlib import Path

    css = (Path(__file__).resolve().parents[2] / stylesheet).read_text(encoding="utf-8")
    rules = re.sub(r"/\*.*?\*/", "", css, flags=re.S).replace(" ", "")
    rules = rules.replace(".table-wraptd.lead-cell{overflow-wrap:anywhere;min-width:12rem;}", "")
    for breaking in (
        "overflow-wrap:anywhere",
        "word-break:break-all",
        "word-break:break-word",
        "hyphens:auto",
        "line-break:anywhere",
    ):
        assert breaking not in rules, f"{stylesheet}: {breaking}"
