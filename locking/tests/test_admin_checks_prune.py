"""The locking app's system check, audit admin, and the prune_fence_events command."""

import warnings
from datetime import timedelta
from io import StringIO

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from locking.checks import external_timeout_below_lock_ttl
from locking.models import FenceEvent
from locking.tests.support import run_django

# --- system checks of the replicas' WAIT -------------------------------------------------


def locking_errors() -> list[tuple[str, str]]:
    return [(m.id, m.msg) for m in checks.run_checks() if m.id.startswith("locking.E")]


@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1:6379/0", "redis+sentinel://127.0.0.1:26379/lock", "redis+cluster://a:1"],
)
def test_replicas_are_accepted_with_every_kind_of_lock_url_cluster_included(settings, url):
    """locking.E001 refused LOCK_REDIS_MIN_REPLICAS with Redis Cluster; the grant now runs
    its WAIT on the slot owner's own connection, so no deployment is refused."""
    settings.LOCK_REDIS_URL = url
    settings.LOCK_REDIS_MIN_REPLICAS = 1
    assert locking_errors() == []


def test_a_replica_wait_not_below_the_socket_timeout_is_refused(settings):
    settings.LOCK_REDIS_URL = "redis+cluster://a:1"
    settings.LOCK_REDIS_MIN_REPLICAS = 1
    settings.LOCK_REDIS_SOCKET_TIMEOUT_SECONDS = 0.5
    settings.LOCK_REDIS_WAIT_TIMEOUT_MS = 500
    assert locking_errors() == [
        (
            "locking.E003",
            "LOCK_REDIS_WAIT_TIMEOUT_MS (500) is not below the lock's socket timeout "
            "LOCK_REDIS_SOCKET_TIMEOUT_SECONDS (0.5s).",
        )
    ]
    settings.LOCK_REDIS_MIN_REPLICAS = 0  # no WAIT: nothing to check
    assert locking_errors() == []


# --- system check -----------------------------------------------------------------------
# locking.W001 / E002 belong to the project (its TTLs, its timeout): deprecated, they run
# only while LOCK_TTL_SETTINGS is set, and say so with a DeprecationWarning.


TTL_SETTINGS = ["CHARGES_LOCK_TTL_SECONDS", "VENDOR_LOCK_TTL_SECONDS"]


def w001(settings) -> list[str]:
    with pytest.warns(DeprecationWarning, match="LOCK_TTL_SETTINGS and check locking.W001"):
        return [m.msg for m in external_timeout_below_lock_ttl() if m.id == "locking.W001"]


def test_check_warns_when_external_timeout_exceeds_half_a_lock_ttl(settings):
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 16
    settings.LOCK_TTL_SETTINGS = TTL_SETTINGS
    settings.VENDOR_LOCK_TTL_SECONDS = 30
    settings.CHARGES_LOCK_TTL_SECONDS = 60

    assert w001(settings) == [
        "EXTERNAL_CALL_TIMEOUT_SECONDS (16s) is not comfortably below VENDOR_LOCK_TTL_SECONDS "
        "(30s)."
    ]
    with pytest.warns(DeprecationWarning, match="LOCK_TTL_SETTINGS"):
        registered = [m for m in checks.run_checks() if m.id == "locking.W001"]
    assert len(registered) == 1
    assert registered[0].level == checks.WARNING


def test_check_is_silent_when_the_timeout_is_at_most_half_of_every_ttl(settings):
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 15
    settings.LOCK_TTL_SETTINGS = TTL_SETTINGS
    settings.VENDOR_LOCK_TTL_SECONDS = 30
    settings.CHARGES_LOCK_TTL_SECONDS = 60
    assert w001(settings) == []


def test_check_covers_every_setting_lock_ttl_settings_names_and_only_those(settings):
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 10
    settings.LOCK_TTL_SETTINGS = TTL_SETTINGS
    settings.VENDOR_LOCK_TTL_SECONDS = 5
    settings.CHARGES_LOCK_TTL_SECONDS = 5
    settings.REPORTS_LOCK_TTL_SECONDS = 1  # not named: not checked
    assert [msg.split(" is not")[1] for msg in w001(settings)] == [
        " comfortably below CHARGES_LOCK_TTL_SECONDS (5s).",
        " comfortably below VENDOR_LOCK_TTL_SECONDS (5s).",
    ]


def test_check_is_off_without_an_external_call_timeout(settings):
    del settings.EXTERNAL_CALL_TIMEOUT_SECONDS
    settings.LOCK_TTL_SETTINGS = TTL_SETTINGS
    settings.VENDOR_LOCK_TTL_SECONDS = 0.1
    with pytest.warns(DeprecationWarning, match="LOCK_TTL_SETTINGS"):
        assert external_timeout_below_lock_ttl() == []


def test_check_is_off_and_quiet_without_lock_ttl_settings(settings):
    if hasattr(settings, "LOCK_TTL_SETTINGS"):
        del settings.LOCK_TTL_SETTINGS
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 16
    settings.VENDOR_LOCK_TTL_SECONDS = 1  # would warn, were it named
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DeprecationWarning either
        assert external_timeout_below_lock_ttl() == []


def test_a_lock_ttl_setting_that_is_not_set_is_an_error(settings):
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 1
    settings.LOCK_TTL_SETTINGS = ["MISSING_LOCK_TTL_SECONDS"]
    with pytest.warns(DeprecationWarning, match="LOCK_TTL_SETTINGS"):
        [error] = external_timeout_below_lock_ttl()
    assert (error.id, error.level) == ("locking.E002", checks.ERROR)
    assert error.msg == "LOCK_TTL_SETTINGS names MISSING_LOCK_TTL_SECONDS, which is not set."


# --- audit admin --------------------------------------------------------------------------


@pytest.mark.django_db
def test_audit_admin_lists_and_filters_events_for_superusers_only(client, django_user_model):
    root = django_user_model.objects.create_superuser(username="root", password="pw-root")
    staff = django_user_model.objects.create_user(username="staff", password="pw", is_staff=True)
    FenceEvent.objects.create(resource="vendor-assignment:complaint:1", token=3, outcome="stale")
    FenceEvent.objects.create(resource="vendor-assignment:complaint:2", token=4, outcome="busy")
    url = reverse("admin:locking_fenceevent_changelist")

    client.force_login(root)
    page = client.get(url, {"outcome__exact": "stale"})
    assert page.status_code == 200
    assert b"vendor-assignment:complaint:1" in page.content
    assert b"vendor-assignment:complaint:2" not in page.content

    client.force_login(staff)
    assert client.get(url).status_code == 403


# --- prune_fence_events -------------------------------------------------------------------


def event_aged(days: float, resource: str) -> FenceEvent:
    return FenceEvent.objects.create(
        resource=resource, outcome="committed", at=timezone.now() - timedelta(days=days)
    )


@pytest.fixture
def aged_events(db):
    return {
        "ancient": event_aged(400, "ancient"),
        "old": event_aged(40, "old"),
        "recent": event_aged(10, "recent"),
        "today": event_aged(0, "today"),
    }


def remaining() -> set[str]:
    return set(FenceEvent.objects.values_list("resource", flat=True))


def prune(*args) -> str:
    out = StringIO()
    call_command("prune_fence_events", *args, stdout=out)
    return out.getvalue()


def test_prune_keeps_the_configured_retention_by_default(aged_events, settings):
    settings.LOCK_FENCE_EVENT_RETENTION_DAYS = 30

    output = prune()

    assert output.startswith("Deleted 2 fence events older than 30 days (before ")
    assert remaining() == {"recent", "today"}


def test_prune_keeps_90_days_when_the_retention_is_not_set(aged_events, settings):
    for name in ("LOCK_FENCE_EVENT_RETENTION_DAYS", "FENCE_EVENT_RETENTION_DAYS"):
        if hasattr(settings, name):
            delattr(settings, name)

    output = prune()

    assert output.startswith("Deleted 1 fence event older than 90 days (before ")
    assert remaining() == {"old", "recent", "today"}


def test_prune_still_reads_the_old_retention_name_and_says_it_is_deprecated(aged_events, settings):
    if hasattr(settings, "LOCK_FENCE_EVENT_RETENTION_DAYS"):
        del settings.LOCK_FENCE_EVENT_RETENTION_DAYS
    settings.FENCE_EVENT_RETENTION_DAYS = 30

    with pytest.warns(DeprecationWarning) as caught:
        output = prune()

    assert output.startswith("Deleted 2 fence events older than 30 days (before ")
    assert [str(w.message) for w in caught] == [
        "locking reads FENCE_EVENT_RETENTION_DAYS for this release only: "
        "set LOCK_FENCE_EVENT_RETENTION_DAYS instead."
    ]


def test_prune_days_overrides_the_retention(aged_events, settings):
    settings.LOCK_FENCE_EVENT_RETENTION_DAYS = 1000

    output = prune("--days", "5")

    assert output.startswith("Deleted 3 fence events older than 5 days")
    assert remaining() == {"today"}


def test_prune_dry_run_counts_and_deletes_nothing(aged_events):
    output = prune("--days", "30", "--dry-run")

    assert output.startswith("Would delete 2 fence events older than 30 days")
    assert remaining() == {"ancient", "old", "recent", "today"}


@pytest.mark.parametrize(
    ("days", "message"),
    [
        ("abc", "--days must be a whole number of days, got 'abc'."),
        ("2.5", "--days must be a whole number of days, got '2.5'."),
        ("0", "--days must be at least 1, got 0."),
        ("-3", "--days must be at least 1, got -3."),
    ],
)
def test_prune_bad_days_is_refused_and_deletes_nothing(aged_events, days, message):
    with pytest.raises(CommandError) as caught:
        prune(f"--days={days}")
    assert str(caught.value) == message
    assert len(remaining()) == 4


def test_prune_bad_retention_setting_is_refused(aged_events, settings):
    settings.LOCK_FENCE_EVENT_RETENTION_DAYS = 0
    with pytest.raises(CommandError, match="at least 1"):
        prune()
    assert len(remaining()) == 4


@pytest.mark.slow
def test_prune_command_line_exit_codes_and_one_line_error(subprocess_env):
    event_aged(100, "old")
    event_aged(1, "recent")

    refused = run_django("prune_fence_events", "--days=-1", env=subprocess_env)
    assert refused.returncode == 1
    assert refused.stderr.strip() == "CommandError: --days must be at least 1, got -1."
    assert remaining() == {"old", "recent"}

    # From cron (stdout not a terminal) a success prints nothing unless -v asks for it.
    quiet = run_django("prune_fence_events", "--days", "30", env=subprocess_env)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert remaining() == {"recent"}
    event_aged(100, "old")
    done = run_django("prune_fence_events", "--days", "30", "-v", "1", env=subprocess_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Deleted 1 fence event older than 30 days")
    assert remaining() == {"recent"}
    bad = run_django("prune_fence_events", "--bogus", env=subprocess_env)
    assert (bad.returncode, bad.stderr) == (1, "CommandError: unrecognized arguments: --bogus\n")
