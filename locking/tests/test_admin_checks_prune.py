"""The locking app's system check, audit admin, and the prune_fence_events command."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

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
    if hasattr(settings, "LOCK_FENCE_EVENT_RETENTION_DAYS"):
        del settings.LOCK_FENCE_EVENT_RETENTION_DAYS

    output = prune()

    assert output.startswith("Deleted 1 fence event older than 90 days (before ")
    assert remaining() == {"old", "recent", "today"}


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
