"""The foundation: settings from the environment, start-up checks, constraints, tenancy."""

import datetime as dt
import os
import sys
from decimal import Decimal

import psycopg
import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.utils import timezone

from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.demo import seed_demo
from hoa.models import Complaint, Notice, Organization, StaffMembership, Unit
from tests.harness.net import closed_port
from tests.harness.processes import django_database_url, run_child, run_manage
from tests.harness.waiting import wait_until
from tests.vendors_support import active_vendor
from vendors.models import Vendor, VendorAssignment, VendorContract


def manage(*args, **env_overrides):
    return run_manage(*args, env=dict(os.environ, **env_overrides))


# --- settings -------------------------------------------------------------------------


def test_production_settings_refuse_to_start_without_secret_key():
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    result = run_manage("check", env=dict(env, DEBUG="0"))
    assert result.returncode == 1
    assert result.stderr.startswith("Configuration error: SECRET_KEY is not set")
    assert "Traceback" not in result.stderr


def test_malformed_boolean_setting_is_a_clear_error():
    result = manage("check", DEBUG="maybe")
    assert result.returncode == 1
    assert "DEBUG must be a boolean" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_deploy_has_no_errors_with_production_environment():
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "ERROR",
        DEBUG="0",
        SECRET_KEY="x" * 20 + "a-real-production-secret-0123456789-abcdefghijklmnop",
        ALLOWED_HOSTS="hoa.example.org",
        # Without a payment service check --deploy fails (vendors.E001): it is set, as in
        # a deployment that pays its vendors.
        VENDOR_PAYMENT_URL="https://payments.example.org/pay",
    )
    assert result.returncode == 0, result.stderr
    # The one warning left (HSTS preload) is explained in docs/security.md.
    assert "security.W021" in result.stderr or "security.W021" in result.stdout


def test_the_project_s_own_settings_report_no_locking_check():
    """hoa.settings as a deployment runs them, defaults and environment alike: none of
    locking's checks (locking/checks.py) fires, warnings included."""
    for environment in ({}, {"LOCK_REDIS_MIN_REPLICAS": "1", "FENCE_EVENT_RETENTION_DAYS": "30"}):
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="hoa.settings", DEBUG="1", **environment)
        result = run_manage("check", "--fail-level", "WARNING", env=env)
        assert result.returncode == 0, result.stderr
        assert "locking." not in result.stdout + result.stderr


def test_settings_come_from_the_environment():
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.DATABASES['default']['NAME'], s.DATABASES['default']['PORT'], "
        "s.CACHES['default']['LOCATION'], s.CHARGES_LOCK_TTL_SECONDS, s.ALLOWED_HOSTS)"
    )
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="hoa.settings",
        DATABASE_URL="postgres://someone@db.internal:6543/hoa_prod",
        REDIS_URL="redis://cache.internal:6380/2",
        CHARGES_LOCK_TTL_SECONDS="90",
        ALLOWED_HOSTS="a.example.org,b.example.org",
    )
    result = run_child([sys.executable, "-c", code], env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "hoa_prod",
        "6543",
        "redis://cache.internal:6380/2",
        "90.0",
        "['a.example.org',",
        "'b.example.org']",
    ]


def test_command_needing_postgres_says_it_is_unreachable_without_traceback():
    result = manage(
        "seed_demo", DEBUG="1", DATABASE_URL=f"postgres://hoa@127.0.0.1:{closed_port()}/hoa"
    )
    assert result.returncode == 1
    assert "PostgreSQL is unreachable" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.django_db(transaction=True)
def test_commands_refuse_an_unmigrated_database_with_one_line():
    from django.db import connection

    settings_dict = connection.settings_dict
    # Named after this run's test database: each pytest-xdist worker has its own.
    unmigrated = f"{settings_dict['NAME']}_unmigrated"
    # On a connection of its own, without the project's 30 s read timeout: CREATE DATABASE
    # waits for a checkpoint-sized write, and on a loaded machine it once took longer.
    with psycopg.connect(django_database_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{unmigrated}"')
        admin.execute(f'CREATE DATABASE "{unmigrated}"')
    try:
        url = (
            f"postgres://{settings_dict['USER']}@{settings_dict['HOST']}:{settings_dict['PORT']}"
            f"/{unmigrated}"
        )
        result = manage(
            "generate_monthly_charges", "--org", "maple-court", DEBUG="1", DATABASE_URL=url
        )
    finally:
        with psycopg.connect(django_database_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{unmigrated}"')
    assert result.returncode == 1
    assert result.stderr.startswith("CommandError: The database is missing ")
    assert result.stderr.strip().endswith("run `python manage.py migrate` first.")
    assert len(result.stderr.strip().splitlines()) == 1


def test_require_services_names_an_unreachable_redis(settings):
    from django.core.management.base import CommandError

    from hoa.management.base import require_services

    settings.LOCK_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    with pytest.raises(CommandError, match="Redis is unreachable"):
        require_services(database=False)


# --- models and constraints ------------------------------------------------------------


@pytest.mark.django_db
def test_complaint_needs_only_organization_unit_and_title(maple):
    unit = maple.units.first()
    complaint = Complaint.objects.create(organization=maple, unit=unit, title="Leak")
    complaint.refresh_from_db()
    assert complaint.status == Complaint.Status.OPEN
    assert complaint.description == ""
    assert complaint.last_fence_token == 0
    assert complaint.sla_due_at == complaint.opened_at + dt.timedelta(hours=72)


@pytest.mark.django_db
def test_one_run_per_organization_and_month(maple):
    MonthlyChargeRun.objects.create(organization=maple, month=dt.date(2026, 12, 1))
    with pytest.raises(IntegrityError), transaction.atomic():
        MonthlyChargeRun.objects.create(organization=maple, month=dt.date(2026, 12, 1))
    assert MonthlyChargeRun.objects.count() == 1


@pytest.mark.django_db
def test_run_month_must_be_the_first_day(maple):
    with pytest.raises(IntegrityError), transaction.atomic():
        MonthlyChargeRun.objects.create(organization=maple, month=dt.date(2026, 12, 2))


@pytest.mark.django_db
def test_completed_run_needs_completed_at(maple):
    with pytest.raises(IntegrityError), transaction.atomic():
        MonthlyChargeRun.objects.create(
            organization=maple, month=dt.date(2026, 12, 1), status="completed"
        )


@pytest.mark.django_db
def test_one_charge_per_run_and_unit(maple):
    run = MonthlyChargeRun.objects.create(organization=maple, month=dt.date(2026, 12, 1))
    unit = maple.units.first()
    MonthlyCharge.objects.create(run=run, unit=unit, amount=Decimal("10.00"))
    with pytest.raises(IntegrityError), transaction.atomic():
        MonthlyCharge.objects.create(run=run, unit=unit, amount=Decimal("10.00"))
    assert MonthlyCharge.objects.count() == 1


@pytest.mark.django_db
def test_at_most_one_active_assignment_per_complaint(maple):
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    first, second = active_vendor("A", maple), active_vendor("B", maple)  # under contract
    VendorAssignment.objects.create(complaint=complaint, vendor=first, fence_token=1)
    with pytest.raises(IntegrityError, match="one_active_assignment"), transaction.atomic():
        VendorAssignment.objects.create(complaint=complaint, vendor=second, fence_token=2)
    # Inactive history rows are unlimited.
    VendorAssignment.objects.create(complaint=complaint, vendor=second, fence_token=3, active=False)
    assert VendorAssignment.objects.filter(complaint=complaint).count() == 2


@pytest.mark.django_db
def test_unit_labels_unique_within_an_organization_only(maple, oak):
    Unit.objects.create(organization=oak, label="M001", monthly_assessment=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Unit.objects.create(organization=maple, label="M001", monthly_assessment=1)


@pytest.mark.django_db
def test_contract_cannot_end_before_it_starts(maple):
    vendor = Vendor.objects.create(name="A")
    with pytest.raises(IntegrityError), transaction.atomic():
        VendorContract.objects.create(
            vendor=vendor,
            organization=maple,
            starts_on=dt.date(2026, 2, 1),
            ends_on=dt.date(2026, 1, 1),
        )


@pytest.mark.django_db
def test_membership_is_unique_per_user_and_organization(alice, maple):
    with pytest.raises(IntegrityError), transaction.atomic():
        StaffMembership.objects.create(user=alice, organization=maple)


# --- tenancy ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_for_user_limits_rows_to_the_users_organizations(alice, mallory, root, nobody, maple, oak):
    Complaint.objects.create(organization=maple, title="maple")
    Complaint.objects.create(organization=oak, title="oak")
    assert list(Organization.objects.for_user(alice)) == [maple]
    assert [c.title for c in Complaint.objects.for_user(alice)] == ["maple"]
    assert [c.title for c in Complaint.objects.for_user(mallory)] == ["oak"]
    assert Complaint.objects.for_user(root).count() == 2
    assert Complaint.objects.for_user(nobody).count() == 0
    assert Unit.objects.for_user(alice).count() == 10


@pytest.mark.django_db
def test_admin_changelist_shows_only_own_organization(client, alice, maple, oak):
    Complaint.objects.create(organization=maple, title="Maple leak")
    Complaint.objects.create(organization=oak, title="Oak noise")
    client.force_login(alice)
    response = client.get("/admin/hoa/complaint/")
    assert response.status_code == 200
    assert b"Maple leak" in response.content
    assert b"Oak noise" not in response.content


@pytest.mark.django_db
def test_admin_change_page_of_another_organization_is_not_found(client, alice, oak):
    other = Complaint.objects.create(organization=oak, title="Oak noise")
    client.force_login(alice)
    response = client.get(f"/admin/hoa/complaint/{other.pk}/change/")
    # The admin answers a missing object with a redirect to its index and a message.
    assert response.status_code == 302
    assert response.url == "/admin/"
    org_page = client.get(f"/admin/hoa/organization/{oak.pk}/change/")
    assert org_page.status_code == 302


@pytest.mark.django_db
def test_superuser_sees_every_organization_in_admin(client, root, maple, oak):
    Complaint.objects.create(organization=maple, title="Maple leak")
    Complaint.objects.create(organization=oak, title="Oak noise")
    client.force_login(root)
    response = client.get("/admin/hoa/complaint/")
    assert b"Maple leak" in response.content and b"Oak noise" in response.content


# --- demo data -------------------------------------------------------------------------


def counts():
    return {
        model.__name__: model.objects.count()
        for model in (
            Organization,
            Unit,
            StaffMembership,
            Complaint,
            Notice,
            Vendor,
            VendorContract,
        )
    }


# Transactional: the demo assigns vendors through the fenced service, which opens its own
# transaction (run_fenced refuses to run inside one).
@pytest.mark.django_db(transaction=True)
def test_seed_demo_twice_leaves_the_same_counts(capsys):
    call_command("seed_demo")
    first = counts()
    output = capsys.readouterr().out
    call_command("seed_demo")
    assert counts() == first
    assert first["Organization"] == 2 and first["Unit"] == 60
    assert "alice" in output and "admin" in output
    # Demo contracts: some current, some expired, one in the future.
    today = timezone.localdate()
    assert VendorContract.objects.filter(ends_on__lt=today).exists()
    assert VendorContract.objects.filter(starts_on__gt=today).exists()
    assert VendorContract.objects.active_on(today).count() >= 3


@pytest.mark.django_db(transaction=True)
def test_seeded_staff_can_log_in_and_reach_their_dashboard(client):
    seed_demo()
    assert client.login(username="alice", password="hoa-demo-2026")
    assert client.get("/orgs/maple-court/").status_code == 200
    assert client.get("/orgs/oak-ridge/").status_code == 404


@pytest.mark.django_db
def test_plain_save_never_moves_the_fence_backwards(maple):
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    stale_copy = Complaint.objects.get(pk=complaint.pk)  # e.g. an admin form opened earlier
    Complaint.objects.filter(pk=complaint.pk).update(last_fence_token=7)  # a fenced write
    stale_copy.title = "Leak in the laundry room"
    stale_copy.save()
    complaint.refresh_from_db()
    assert complaint.title == "Leak in the laundry room"
    assert complaint.last_fence_token == 7


def form_values(html: str, form_id: str) -> dict:
    """The values a browser would submit from the form ``form_id`` of ``html``."""
    from html.parser import HTMLParser

    class Parser(HTMLParser):
        def __init__(self):
            super().__init__()
            self.inside, self.values, self.textarea, self.select = False, {}, None, None

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "form":
                self.inside = attrs.get("id") == form_id
            if not self.inside or (not attrs.get("name") and tag != "option"):
                return
            if tag == "input" and attrs.get("type") not in {"submit", "checkbox"}:
                self.values[attrs["name"]] = attrs.get("value", "")
            elif tag == "input" and "checked" in attrs:
                self.values[attrs["name"]] = attrs.get("value", "on")
            elif tag == "textarea":
                self.textarea = attrs["name"]
                self.values[self.textarea] = ""
            elif tag == "select":
                self.select = attrs["name"]
            elif tag == "option" and self.select and "selected" in attrs:
                self.values[self.select] = attrs.get("value", "")

        def handle_endtag(self, tag):
            if tag == "textarea":
                self.textarea = None
            elif tag == "select":
                self.select = None
            elif tag == "form":
                self.inside = False

        def handle_data(self, data):
            if self.textarea:
                self.values[self.textarea] += data

    parser = Parser()
    parser.feed(html)
    return parser.values


def wait_for_lock_wait(timeout=60.0) -> None:
    """Wait until some other backend of this database is blocked on a row lock."""
    from django.db import connection

    def waiting() -> int:
        with connection.cursor() as cursor:
            # Inside a transaction pg_stat_activity is a snapshot taken at its first read.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0]

    wait_until(waiting, what="a backend to wait for the row lock", timeout=timeout)


@pytest.mark.django_db(transaction=True)
def test_admin_save_does_not_undo_a_concurrent_sla_breach(client, alice, maple):
    import threading

    from django.db import connection

    complaint = Complaint.objects.create(organization=maple, title="Leak")
    client.force_login(alice)
    data = form_values(
        client.get(f"/admin/hoa/complaint/{complaint.pk}/change/").content.decode(),
        "complaint_form",
    )
    data["title"] = "Leak (plumber called)"
    answers = []

    def staff_saves():
        try:
            answers.append(client.post(f"/admin/hoa/complaint/{complaint.pk}/change/", data))
        finally:
            connection.close()

    breached_at = timezone.now()
    staff = threading.Thread(target=staff_saves)
    with transaction.atomic():
        # The sweep holds the row: the admin reads the complaint, then its UPDATE waits here.
        Complaint.objects.select_for_update().get(pk=complaint.pk)
        staff.start()
        wait_for_lock_wait()
        Complaint.objects.filter(pk=complaint.pk).update(
            sla_breached_at=breached_at, last_fence_token=3
        )
    staff.join(timeout=30)
    assert answers and answers[0].status_code == 302
    complaint.refresh_from_db()
    assert complaint.title == "Leak (plumber called)"
    assert complaint.sla_breached_at == breached_at
    assert complaint.last_fence_token == 3


@pytest.mark.django_db(transaction=True)
def test_lost_database_is_a_503_page_not_a_500(client, alice):
    from django.db import connection

    client.force_login(alice)
    real_port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = str(closed_port())  # PostgreSQL is now "down"
    try:
        response = client.get("/orgs/")
    finally:
        connection.close()
        connection.settings_dict["PORT"] = real_port
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    assert b"Nothing was changed" in response.content
