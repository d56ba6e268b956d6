"""The Content-Security-Policy in a real browser: the staff pages (with their charts and the
lock page's htmx refresh) and the admin pages a staff member uses raise no violation.

A test that only read headers could not tell whether the browser blocks something the
pages need; Chromium reports every blocked script, style or form as a
``securitypolicyviolation`` event, which the page collects from its first byte on.
"""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from hoa.models import Complaint
from hoa.ops.views import LockStatusView
from locking.models import FenceEvent

# The staff-site browser tests' fixtures, shared (the test's parameters use them: F811).
from tests.browser.test_browser_staff import chromium, open_as, site  # noqa: F401
from tests.vendors_support import active_vendor

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Runs in every page before its own scripts; init scripts are not subject to the page's CSP.
COLLECT_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
});
"""


def violations(page) -> list[str]:
    return page.evaluate("window.__cspViolations")


def test_pages_raise_no_csp_violation(open_as, site, alice, olivia, maple, monkeypatch):  # noqa: F811
    monkeypatch.setattr(LockStatusView, "refresh_seconds", 1)
    complaint = Complaint.objects.create(organization=maple, title="Leaking pipe")
    active_vendor("Pipe Pros", maple)
    FenceEvent.objects.create(
        resource=f"monthly-charges:org:{maple.pk}:2026-03",
        scope=f"org:{maple.pk}",
        operation="monthly-charges",
        outcome="committed",
        token=1,
        actor="alice",
    )
    page = open_as("alice")
    page.context.add_init_script(COLLECT_VIOLATIONS)
    found = {}

    for path in [
        "/orgs/",
        f"/orgs/{maple.slug}/",
        f"/orgs/{maple.slug}/charges/",
        f"/orgs/{maple.slug}/charges/2026-03/",
        f"/orgs/{maple.slug}/complaints/",
        f"/orgs/{maple.slug}/complaints/{complaint.pk}/",
        f"/orgs/{maple.slug}/vendors/",
        "/admin/",
        "/admin/hoa/complaint/",
        f"/admin/hoa/complaint/{complaint.pk}/change/",
        "/admin/charges/monthlychargerun/",
    ]:
        page.goto(f"{site}{path}")
        page.wait_for_load_state("load")
        found[path] = violations(page)

    # The lock page (an operator's), through two of its htmx refreshes.
    page = open_as("olivia")
    page.context.add_init_script(COLLECT_VIOLATIONS)
    page.goto(f"{site}/ops/locks/")
    with page.expect_response(lambda response: "/ops/locks/" in response.url):
        pass
    with page.expect_response(lambda response: "/ops/locks/" in response.url):
        pass
    found["/ops/locks/ (refreshed)"] = violations(page)

    # The admin action's intermediate page, reached the way the changelist's form posts.
    page.goto(f"{site}/admin/hoa/complaint/")
    page.check(f"input[name='{ACTION_CHECKBOX_NAME}'][value='{complaint.pk}']")
    page.select_option("select[name='action']", "assign_vendor")
    page.click("button[name='index']")
    page.wait_for_selector("input[name='apply']")
    found["assign action form"] = violations(page)

    assert found == {where: [] for where in found}
