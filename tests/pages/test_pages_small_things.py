"""What a new user tripped over (issue 47, item 7), at the request level: the password page
is the staff site's, one association opens straight away, the residents' page is not the
staff site's, the charges chart says what it shows."""

import re
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.urls import reverse

from hoa.complaints import workflow
from hoa.complaints.workflow import Reporter, open_complaint
from hoa.models import scope_for_organization
from locking.audit import record_fence_event

pytestmark = pytest.mark.django_db


def test_the_password_change_page_is_the_staff_sites_and_linked_from_every_page(client, alice):
    client.force_login(alice)
    dashboard = client.get("/orgs/maple-court/").content.decode()
    assert f'href="{reverse("password_change")}"' in dashboard

    html = client.get(reverse("password_change")).content.decode()
    assert 'class="brand"' in html and "HOA staff" in html  # the staff site's header
    assert "Django administration" not in html

    answer = client.post(
        reverse("password_change"),
        {
            "old_password": "pw-alice",
            "new_password1": "a new long passphrase",
            "new_password2": "a new long passphrase",
        },
        follow=True,
    )
    done = answer.content.decode()
    assert "Password changed" in done and "Django administration" not in done
    alice.refresh_from_db()
    assert alice.check_password("a new long passphrase")


def test_the_admins_password_link_opens_the_same_page(client, root):
    client.force_login(root)
    html = client.get(reverse("admin:password_change")).content.decode()
    assert 'data-testid="password-change"' in html and "Django administration" not in html


def test_signing_in_opens_the_one_association_of_its_staff(client, alice, mallory, root, oak):
    client.force_login(alice)
    assert client.get("/")["Location"] == "/orgs/maple-court/"
    client.force_login(root)  # every association: the list to pick from
    assert client.get("/")["Location"] == reverse("hoa:organizations")
    assert client.get(reverse("hoa:organizations")).status_code == 200


def test_staff_of_no_association_land_on_the_list_that_says_so(client, nobody):
    client.force_login(nobody)
    assert client.get("/")["Location"] == reverse("hoa:organizations")


@pytest.mark.parametrize("signed_in", [False, True], ids=["resident", "staff-signed-in"])
def test_the_residents_opt_out_page_is_the_associations_not_the_staff_sites(
    maple, alice, signed_in
):
    complaint = open_complaint(
        organization=maple, unit=None, title="Lift", description="", priority="low",
        reporter=Reporter("Ana Ruiz", "ana@example.org", ""), actor=alice,
    )  # fmt: skip
    browser = Client()
    if signed_in:  # a staff member who follows a resident's link sees what the resident sees
        browser.force_login(alice)
    pages = [
        browser.get(urlsplit(workflow.opt_out_url(complaint)).path),
        browser.get(reverse("hoa:reporter-opt-out", args=["not-ours"])),
    ]
    assert [page.status_code for page in pages] == [200, 400]
    for page in pages:
        html = page.content.decode()
        assert "HOA staff" not in html and "Log out" not in html
        assert "Back to your associations" not in html and "/orgs/" not in html
    assert '<span class="brand">Maple Court</span>' in pages[0].content.decode()


def test_every_row_of_the_dashboards_lists_holds_its_link_alone_so_all_look_alike(
    client, olivia, maple
):
    """A lead cell with text beside its link underlines it (site.css, for axe's
    link-in-text-block): the unit and the person have their own columns instead, so a row
    with a unit or a person looks like a row without."""
    for unit in (maple.units.first(), None):
        open_complaint(
            organization=maple, unit=unit, title="Lift", description="", priority="high",
            reporter=Reporter("Ana Ruiz", "", ""), actor=olivia,
        )  # fmt: skip
    for actor in ("olivia", ""):
        record_fence_event(
            resource=f"monthly-charges:org:{maple.pk}:2026-11",
            outcome="committed",
            token=1,
            actor=actor,
            scope=scope_for_organization(maple),
            operation="monthly-charges",
        )
    client.force_login(olivia)
    html = client.get(f"/orgs/{maple.slug}/").content.decode()

    cells = re.findall(r'<td class="lead-cell">(.*?)</td>', html, re.S)
    assert len(cells) == 4
    assert all(re.fullmatch(r"<a [^>]*>[^<]*</a>", cell) for cell in cells), cells
    assert 'data-label="Unit">M001</td>' in html and 'data-label="By">olivia</td>' in html


def first_in_main(html: str) -> str:
    return html.split('<main id="main">', 1)[1].lstrip().split("\n", 1)[0]


def test_every_page_under_a_list_has_its_way_back_first_above_its_title(client, olivia, maple):
    complaint = open_complaint(
        organization=maple, unit=None, title="Lift", description="", priority="low",
        reporter=Reporter("Ana Ruiz", "", ""), actor=olivia,
    )  # fmt: skip
    client.force_login(olivia)
    resource = f"monthly-charges:org:{maple.pk}:2026-11"
    pages = {
        f"/orgs/{maple.slug}/complaints/{complaint.pk}/": (
            f"/orgs/{maple.slug}/complaints/",
            "All complaints",
        ),
        f"/orgs/{maple.slug}/complaints/new/": (
            f"/orgs/{maple.slug}/complaints/",
            "All complaints",
        ),
        f"/orgs/{maple.slug}/charges/2026-11/": (f"/orgs/{maple.slug}/charges/", "All months"),
        f"/ops/locks/break/?resource={resource}": (
            f"/ops/locks/?resource={resource.replace(':', '%3A')}",
            "Lock status",
        ),
    }
    for path, (back, label) in pages.items():
        html = client.get(path).content.decode()
        assert first_in_main(html) == (
            f'<p class="back"><a href="{back}" data-testid="back-link">← {label}</a></p>'
        ), path
        assert html.count('data-testid="back-link"') == 1, path
