"""The admin for office staff (issue 37, item 2): alice reads every admin page she may
open without the fence's bookkeeping (tokens, recorded tokens, epochs, counters, fenced
attempts), as on her pages; olivia, an operator, reads the same pages with it. The
"Admin" entry of the menu is there exactly for those the admin has something to show.

Every model registered with the admin is read, so an operation's new admin is checked
without being listed here. Against the real PostgreSQL and Redis: the assignment and the
charge run are made by their fenced services.
"""

import re
from datetime import timedelta

import pytest
from django.contrib import admin
from django.test import Client
from django.utils import timezone

from charges.selectors import current_month
from charges.services import generate_monthly_charges
from hoa.models import Complaint, Notice
from tests.vendors_support import active_vendor
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)

# What office staff never read in the admin: the words, and the fields' names.
FENCING = re.compile(r"fenc|token|epoch|counter", re.IGNORECASE)


@pytest.fixture
def rows(maple, alice, fence_lock):
    """One row of every kind an office has, the fenced ones made by their services."""
    complaint = Complaint.objects.create(
        organization=maple, title="Leak under the sink", unit=maple.units.first()
    )
    vendor = active_vendor("Pipe Pros", maple)
    assign_vendor(complaint=complaint, vendor=vendor, actor=alice)
    generate_monthly_charges(organization=maple, month=current_month(), actor=alice)
    Notice.objects.create(
        organization=maple, title="Water off on Friday", publish_at=timezone.now() + timedelta(1)
    )
    return {"complaint": complaint}


def visible_text(html: str) -> str:
    """What a person reads of a page: no markup, no scripts, no form tokens."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def admin_pages(client: Client) -> list[str]:
    """Each registered model's changelist and the change page of its first row, as far as
    ``client``'s user may open them."""
    pages = []
    for model in admin.site._registry:
        opts = model._meta
        changelist = f"/admin/{opts.app_label}/{opts.model_name}/"
        response = client.get(changelist)
        if response.status_code != 200:
            continue  # not hers: 403, or the admin's redirect
        pages.append(changelist)
        first = response.context["cl"].result_list[:1]
        if first:
            pages.append(f"{changelist}{first[0].pk}/change/")
    return pages


def test_office_staff_read_no_fencing_internals_on_any_admin_page(alice, rows):
    client = Client()
    client.force_login(alice)

    pages = admin_pages(client)

    opened = {page.split("/")[3] for page in pages}
    assert {"complaint", "monthlychargerun", "vendorassignment", "notice"} <= opened
    assert f"/admin/hoa/complaint/{rows['complaint'].pk}/change/" in pages
    for page in ["/admin/", *pages]:
        response = client.get(page)
        assert response.status_code == 200, page
        html = response.content.decode()
        found = FENCING.findall(visible_text(html))
        assert found == [], f"{page}: {found}"
        assert "fence_token" not in html, page  # no column, field or filter by that name


def test_operators_read_the_fencing_tokens_on_the_same_pages(olivia, rows):
    client = Client()
    client.force_login(olivia)
    complaint = rows["complaint"]
    complaint.refresh_from_db()

    page = visible_text(client.get(f"/admin/hoa/complaint/{complaint.pk}/change/").content.decode())

    assert re.search(r"Last fence token:?\s+" + str(complaint.last_fence_token), page)
    assert "Fencing token" in page  # the assignment inline's column
    runs = visible_text(client.get("/admin/charges/monthlychargerun/").content.decode())
    assert "Last fence token" in runs
    assignments = visible_text(client.get("/admin/vendors/vendorassignment/").content.decode())
    assert "Fencing token" in assignments
    assert client.get("/admin/locking/fenceevent/").status_code == 200


def menu_of(client: Client) -> str:
    page = client.get("/orgs/").content.decode()
    return re.search(r'<nav aria-label="Main">(.*?)</nav>', page, flags=re.S)[1]


def test_the_menu_offers_the_admin_to_whom_it_shows_something(alice, olivia, viewer, rows):
    for user, offered in ((alice, True), (olivia, True), (viewer, False)):
        client = Client()
        client.force_login(user)
        index = client.get("/admin/").content.decode()
        shows_something = "have permission to view or edit anything" not in index
        assert shows_something is offered, user.username
        assert ('href="/admin/"' in menu_of(client)) is offered, user.username
