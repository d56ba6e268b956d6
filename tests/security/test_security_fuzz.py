"""Property-based fuzzing of every form field and URL parameter, through the test client and
both commands: never a 5xx or a traceback, nothing written on refusal, input escaped.

Each target is a ``check_*`` function of the fields it fills. Hypothesis fills them with
unicode text mixed with known troublemakers (NUL bytes, SQL and HTML metacharacters, path
tricks, unicode digits, strings far past every column's length); and every troublemaker
goes into every field of every target once more, deterministically, so that none depends
on hypothesis drawing it. The examples of one test share its database, so each check
compares what it wrote with a snapshot taken just before it.
"""

import inspect
from dataclasses import dataclass
from datetime import date
from io import StringIO
from urllib.parse import quote

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from charges.exceptions import InvalidMonth
from charges.forms import parse_month
from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.management.base import EXIT_TEMPFAIL
from hoa.models import Complaint, Notice
from tests.harness.processes import run_manage
from tests.vendors_support import active_vendor
from vendors.models import VendorAssignment

SCRIPT = "<script>alert(1)</script>"
TROUBLEMAKERS = [
    "",
    " ",
    "\x00",
    "2026-03\x00",
    "\x00' OR 1=1 --",
    "'; DROP TABLE hoa_complaint; --",
    "' OR '1'='1",
    '"><script>alert(1)</script>',
    SCRIPT,
    "%00",
    "%2e%2e%2f",
    "../../etc/passwd",
    "2026-13",
    "0000-01",
    "9999-12",
    "\uff12\uff10\uff12\uff16-\uff10\uff13",  # fullwidth digits: 2026-03
    "-1",
    "0",
    "1e309",
    "NaN",
    "9" * 40,
    "x" * 5000,
    "lock:{x}",
    "monthly-charges:org:1:2026-03",
    "\u202e\u0000\ufeff",
    "\r\nSet-Cookie: a=b",
    "ünïcødé ✓ 日本語",
]
# Long strings made cheaply (a long st.text costs hypothesis a lot of entropy). Characters a
# request can carry: a lone surrogate has no UTF-8 form (st.text leaves them out too).
HUGE = st.builds(
    lambda char, count: char * count, st.characters(codec="utf-8"), st.integers(1000, 5000)
)
values = st.one_of(
    st.sampled_from(TROUBLEMAKERS),
    st.text(max_size=60),
    st.builds(lambda a, b: a + b, st.sampled_from(TROUBLEMAKERS), st.text(max_size=20)),
    HUGE,
)
# The text a command line can carry (no NUL: the OS refuses it in argv).
argv_values = values.filter(lambda value: "\x00" not in value)

FUZZ = settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Written:
    runs: tuple
    charges: int
    assignments: tuple
    complaint_tokens: tuple
    notices: int


def written() -> Written:
    return Written(
        runs=tuple(MonthlyChargeRun.objects.order_by("pk").values_list("pk", "status")),
        charges=MonthlyCharge.objects.count(),
        assignments=tuple(VendorAssignment.objects.order_by("pk").values_list("pk", "active")),
        complaint_tokens=tuple(
            Complaint.objects.order_by("pk").values_list("pk", "last_fence_token")
        ),
        notices=Notice.objects.count(),
    )


def assert_safe(response, *statuses: int) -> str:
    """No server error, one of the expected answers, no raw script from the input."""
    assert response.status_code < 500
    assert response.status_code in statuses, response.status_code
    body = response.content.decode(errors="replace")
    assert "Traceback" not in body
    assert "<script>alert(1)" not in body
    return body


def month_ok(value: str) -> bool:
    try:
        parse_month(value)
    except InvalidMonth:
        return False
    return True


def segment(value: str) -> str:
    return quote(value, safe="")


@pytest.fixture(autouse=True)
def generous_limits(settings):
    """Fuzzing is not about rate limits (tests/security/test_security_ratelimits.py is)."""
    settings.FENCED_POST_RATE = settings.FENCED_POST_IP_RATE = "100000/d"
    settings.LOGIN_RATE = settings.LOGIN_LOCKOUT_RATE = "100000/d"
    settings.AUDIT_DENIAL_RATE = "100000/d"


@dataclass(frozen=True)
class World:
    complaint: Complaint
    alice: Client
    olivia: Client  # an operator of Maple Court: the lock page is the operators'
    mallory: Client
    root: Client
    maple_id: int
    vendor_id: int

    def or_valid(self, value: str | None, valid: int) -> str:
        """``value``, or (when the check was given none) a valid id."""
        return str(valid) if value is None else value


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def world(maple, oak, alice, olivia, mallory, root) -> World:
    complaint = Complaint.objects.create(organization=maple, title="Leaking pipe")
    vendor = active_vendor("Pipe Pros", maple)
    return World(
        complaint=complaint,
        alice=client_for(alice),
        olivia=client_for(olivia),
        mallory=client_for(mallory),
        root=client_for(root),
        maple_id=maple.pk,
        vendor_id=vendor.pk,
    )


# -- the targets -------------------------------------------------------------------------


def check_generate_endpoint(world: World, month: str = "2026-03") -> None:
    url = f"/orgs/maple-court/charges/{segment(month)}/generate/"
    before = written()

    assert_safe(world.mallory.post(url), 404)
    assert written() == before
    response = world.alice.post(url, {"confirm": "yes"})
    assert_safe(response, 303, 400, 404)
    if response.status_code == 303:
        assert month_ok(month)
    else:
        assert written() == before


def check_run_pages(world: World, month: str = "2026-03") -> None:
    assert_safe(world.alice.get(f"/orgs/maple-court/charges/{segment(month)}/"), 200, 400, 404)
    assert_safe(world.alice.get("/orgs/maple-court/charges/", {"month": month}), 302, 400)


def check_assign_form(
    world: World,
    vendor: str | None = None,
    reassign: str = "",
    complaint_id: str | None = None,
    replacing: str | None = None,
) -> None:
    vendor = world.or_valid(vendor, world.vendor_id)
    complaint_id = world.or_valid(complaint_id, world.complaint.pk)
    before = written()
    response = world.alice.post(
        f"/orgs/maple-court/complaints/{world.complaint.pk}/assign/",
        {"vendor": vendor, "reassign": reassign},
    )
    assert_safe(response, 303, 400)
    if response.status_code == 400:
        assert written() == before

    before = written()
    other = world.alice.post(
        f"/orgs/maple-court/complaints/{segment(complaint_id)}/assign/", {"vendor": vendor}
    )
    assert_safe(other, 303, 400, 404)
    if other.status_code != 303:
        assert written() == before
    page = world.alice.get(f"/orgs/maple-court/complaints/{segment(complaint_id)}/")
    assert_safe(page, 200, 404)

    if replacing is not None:  # the assignment the page showed, as posted back
        before = written()
        shown = world.alice.post(
            f"/orgs/maple-court/complaints/{world.complaint.pk}/assign/",
            {"vendor": vendor, "reassign": "on", "replacing": replacing},
        )
        assert_safe(shown, 303, 400, 409)
        if shown.status_code != 303:
            assert written() == before


def check_lock_page(
    world: World, resource: str = "", outcome: str = "", operation: str = "", page: str = ""
) -> None:
    query = {"resource": resource, "outcome": outcome, "operation": operation, "page": page}
    for client in (world.olivia, world.root):
        assert_safe(client.get("/ops/locks/", query), 200, 400)
        assert_safe(client.get("/ops/locks/", query, headers={"hx-request": "true"}), 200, 400)


def check_slugs_and_paths(world: World, slug: str = "maple-court", path: str = "orgs/") -> None:
    assert_safe(world.alice.get(f"/orgs/{segment(slug)}/"), 200, 404)
    assert_safe(world.alice.get(f"/{segment(path)}"), 200, 302, 404)


def check_sign_in(
    world: World,
    username: str = "alice",
    password: str = "wrong",  # noqa: S107
    next_url: str = "/",
) -> None:
    for url in ("/accounts/login/", "/admin/login/"):
        form = {"username": username, "password": password, "next": next_url}
        assert_safe(Client().post(url, form), 200)


def check_admin_changelists(
    world: World, search: str = "", order: str = "1", page: str = "0", org: str | None = None
) -> None:
    org = world.or_valid(org, world.maple_id)
    for url in ("/admin/hoa/complaint/", "/admin/charges/monthlychargerun/"):
        query = {"q": search, "o": order, "p": page, "organization__id__exact": org}
        assert_safe(world.alice.get(url, query), 200, 302)


def check_admin_actions(
    world: World, month: str = "2026-03", selected: str | None = None, vendor: str | None = None
) -> None:
    selected = world.or_valid(selected, world.maple_id)
    vendor = world.or_valid(vendor, world.vendor_id)
    before = written()
    generate = world.alice.post(
        "/admin/hoa/organization/",
        {
            "action": "generate_charges_for_month",
            ACTION_CHECKBOX_NAME: [selected],
            "month": month,
            "apply": "Generate",
            "confirm": "on",
        },
    )
    assign = world.alice.post(
        "/admin/hoa/complaint/",
        {"action": "assign_vendor", ACTION_CHECKBOX_NAME: [selected], "vendor": vendor},
    )
    assert_safe(generate, 200, 302)
    assert_safe(assign, 200, 302)
    # Neither Maple's id nor its complaint's was selected: nothing can have been written.
    if selected.strip() not in (str(world.maple_id), str(world.complaint.pk)):
        assert written() == before


def run_command(*args) -> int:
    """The exit status of an in-process command run; a refusal is one line, no traceback."""
    try:
        call_command(*args, stdout=StringIO(), stderr=StringIO())
    except CommandError as exc:
        message = str(exc)
        assert "\n" not in message.strip() and "Traceback" not in message, message
        assert len(message) < 1000, message  # the input quoted back cut short
        return exc.returncode
    return 0


def check_generate_command(
    world: World, org: str = "maple-court", month: str = "2026-03", actor: str = "alice"
) -> None:
    before = written()
    status = run_command(
        "generate_monthly_charges", "--org", org, "--month", month, "--actor", actor
    )
    assert status in (0, 1, EXIT_TEMPFAIL)
    if status != 0:
        assert written() == before


def check_assign_command(
    world: World, complaint: str | None = None, vendor: str | None = None, actor: str = "alice"
) -> None:
    complaint = world.or_valid(complaint, world.complaint.pk)
    vendor = world.or_valid(vendor, world.vendor_id)
    before = written()
    status = run_command(
        "assign_vendor", "--complaint", complaint, "--vendor", vendor, "--actor", actor
    )
    assert status in (0, 1, EXIT_TEMPFAIL)
    if status != 0:
        assert written() == before


CHECKS = [
    check_generate_endpoint,
    check_run_pages,
    check_assign_form,
    check_lock_page,
    check_slugs_and_paths,
    check_sign_in,
    check_admin_changelists,
    check_admin_actions,
    check_generate_command,
    check_assign_command,
]


# -- every troublemaker in every field ---------------------------------------------------


COMMAND_CHECKS = {check_generate_command, check_assign_command}


@pytest.mark.slow
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__[len("check_") :])
def test_every_troublemaker_in_every_field(world, check):
    fields = [name for name in inspect.signature(check).parameters if name != "world"]
    for field in fields:
        for value in TROUBLEMAKERS:
            if check in COMMAND_CHECKS and "\x00" in value:
                continue  # a command line cannot carry a NUL byte
            check(world, **{field: value})  # the other fields valid


# -- hypothesis --------------------------------------------------------------------------


@FUZZ
@given(month=values)
def test_fuzzed_month_on_the_generate_endpoint(world, month):
    check_generate_endpoint(world, month)


@FUZZ
@given(month=values)
def test_fuzzed_month_on_the_run_pages(world, month):
    check_run_pages(world, month)


@FUZZ
@given(
    vendor=values,
    reassign=values,
    complaint_id=st.one_of(values, st.integers(-1, 10**30).map(str)),
    replacing=st.one_of(values, st.integers(-1, 10**30).map(str)),
)
def test_fuzzed_assign_form_and_complaint_id(world, vendor, reassign, complaint_id, replacing):
    check_assign_form(world, vendor, reassign, complaint_id, replacing)


@FUZZ
@given(resource=values, outcome=values, operation=values, page=values)
def test_fuzzed_lock_page_filters(world, resource, outcome, operation, page):
    check_lock_page(world, resource, outcome, operation, page)


@FUZZ
@given(slug=values, path=values)
def test_fuzzed_slugs_and_paths(world, slug, path):
    check_slugs_and_paths(world, slug, path)


@FUZZ
@given(username=values, password=values, next_url=values)
def test_fuzzed_sign_in(world, username, password, next_url):
    check_sign_in(world, username, password, next_url)


@FUZZ
@given(search=values, order=values, page=values, org=values)
def test_fuzzed_admin_changelist_parameters(world, search, order, page, org):
    check_admin_changelists(world, search, order, page, org)


@FUZZ
@given(month=values, selected=st.one_of(values, st.integers(-1, 10**30).map(str)), vendor=values)
def test_fuzzed_admin_action_forms(world, month, selected, vendor):
    check_admin_actions(world, month, selected, vendor)


@FUZZ
@given(org=argv_values, month=argv_values, actor=argv_values)
def test_fuzzed_generate_command(world, org, month, actor):
    check_generate_command(world, org, month, actor)


@FUZZ
@given(
    complaint=st.one_of(argv_values, st.integers(-1, 10**30).map(str)),
    vendor=argv_values,
    actor=argv_values,
)
def test_fuzzed_assign_command(world, complaint, vendor, actor):
    check_assign_command(world, complaint, vendor, actor)


@pytest.mark.slow
@pytest.mark.parametrize(
    "value", ["'; DROP TABLE hoa_complaint; --\n<script>alert(1)</script>", "\uff12" * 5000]
)
def test_commands_in_a_child_process_answer_one_line_for_nasty_values(world, subprocess_env, value):
    complaint = str(world.complaint.pk)
    for args in (
        ("generate_monthly_charges", "--org", value, "--month", "2026-03"),
        ("generate_monthly_charges", "--org", "maple-court", "--month", value),
        ("generate_monthly_charges", "--org", "maple-court", "--actor", value),
        ("assign_vendor", "--complaint", value, "--vendor", "1"),
        ("assign_vendor", "--complaint", complaint, "--vendor", value),
        ("assign_vendor", "--complaint", complaint, "--vendor", "1", "--actor", value),
    ):
        result = run_manage(*args, env=subprocess_env)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.startswith("CommandError: "), (args, result.stderr)
        assert result.stderr.count("\n") == 1, (args, result.stderr)
        assert len(result.stderr) < 1000, (args, result.stderr)
    assert not MonthlyChargeRun.objects.filter(month=date(2026, 3, 1)).exists()
