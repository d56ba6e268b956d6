"""``manage.py locks``: the leases held now and the latest attempts, one line each (or JSON
Lines), and ``locks break RESOURCE --token N --reason …`` on a real stuck holder, a
first-ever one included, and never on a holder granted since it was listed; its exit
codes, run as the shell runs it (a child ``django-admin``).
"""

import getpass
import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from locking import Outcome
from locking.audit import record_fence_event
from locking.keys import holder_label, lock_key
from locking.models import FenceEvent
from locking.tests.support import free_port, run_django

STUCK = timedelta(seconds=45)  # under a minute: its time left reads "N s"
FIRST = "job:first"  # granted and never released, before any attempt was recorded
KNOWN = "job:known"  # granted and never released, with attempts on record


@pytest.fixture(autouse=True)
def default_scopes(settings):
    """locking's own answer (a project's settings may name theirs): a resource is in the
    scope of its latest recorded attempt."""
    settings.LOCK_SCOPES_CALLABLE = "locking.operators.recorded_scopes"


@pytest.fixture
def stuck(fence_lock):
    """Two holders that never release: one first-ever (no audit row), one with attempts."""
    record_fence_event(
        resource=KNOWN, outcome=Outcome.COMMITTED, token=7, actor="cron", scope="org:1"
    )
    record_fence_event(
        resource=KNOWN, outcome=Outcome.BUSY, token=7, actor="ana", detail="held by\ncron"
    )
    return {
        FIRST: fence_lock.acquire(FIRST, ttl=STUCK, holder="first-worker"),
        KNOWN: fence_lock.acquire(KNOWN, ttl=STUCK, holder="known-worker"),
    }


def locks(*args) -> list[str]:
    out = StringIO()
    call_command("locks", *args, stdout=out)
    return out.getvalue().splitlines()


LEASE_LINE = re.compile(
    r"lease    (?P<resource>\S+)  token (?P<token>\d+)  held by (?P<holder>.+) since "
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, expires in (?P<left>\d+ s) \((?P<state>held)\)"
)


@pytest.mark.django_db
def test_locks_lists_the_leases_held_now_then_the_latest_attempts_one_line_each(stuck):
    lines = locks()

    assert len(lines) == 4
    leases = [LEASE_LINE.fullmatch(line) for line in lines[:2]]
    assert all(leases), lines
    assert [(m["resource"], int(m["token"]), m["holder"], m["state"]) for m in leases] == [
        (FIRST, stuck[FIRST].token, holder_label("first-worker"), "held"),
        (KNOWN, stuck[KNOWN].token, holder_label("known-worker"), "held"),
    ]
    assert all(1 <= int(m["left"].removesuffix(" s")) <= 45 for m in leases)
    # Newest first; a detail's line breaks do not break the one line.
    assert re.fullmatch(
        r"attempt  \S+ \S+ UTC  busy  job:known  token 7  by ana: held by cron", lines[2]
    )
    assert re.fullmatch(r"attempt  \S+ \S+ UTC  committed  job:known  token 7  by cron", lines[3])


@pytest.mark.django_db
def test_locks_json_prints_one_object_per_line(stuck):
    items = [json.loads(line) for line in locks("--json")]

    assert [(item["kind"], item["resource"]) for item in items] == [
        ("lease", FIRST),
        ("lease", KNOWN),
        ("attempt", KNOWN),
        ("attempt", KNOWN),
    ]
    first = items[0]
    assert (first["token"], first["owner"], first["holder"], first["state"]) == (
        stuck[FIRST].token,
        stuck[FIRST].owner,
        holder_label("first-worker"),
        "held",
    )
    assert 0 < first["expires_in_seconds"] <= 45
    assert first["expires_in"] == f"{int(first['expires_in_seconds'])} s"
    assert first["acquired_at"].endswith("+00:00")  # ISO 8601, UTC
    oldest = items[3]
    assert oldest.pop("at") == FenceEvent.objects.earliest("id").at.isoformat()
    assert oldest == {
        "kind": "attempt",
        "resource": KNOWN,
        "outcome": "committed",
        "token": 7,
        "actor": "cron",
        "operation": "",
        "scope": "org:1",
        "ip": None,
        "detail": "",
    }


@pytest.mark.django_db
def test_locks_list_narrows_to_a_prefix_and_counts_attempts(stuck):
    assert [line.split()[1] for line in locks("list", "job:f")] == [FIRST, "attempt"]
    assert locks("list", "job:f")[1] == "No attempt is recorded."
    assert len(locks("--attempts", "1")) == 3
    assert len(locks("--attempts", "0")) == 2


@pytest.mark.django_db
def test_locks_says_when_nothing_is_held_or_recorded(fence_lock):
    assert locks() == ["No lease is held.", "No attempt is recorded."]
    assert locks("--json") == []


@pytest.mark.django_db
def test_locks_break_breaks_a_first_ever_holder_and_audits_it_as_every_break(stuck, redis_client):
    lease = stuck[FIRST]

    lines = locks("break", FIRST, "--token", str(lease.token), "--reason", "first-worker hangs")

    assert lines == [
        f"Broke the lease of {holder_label('first-worker')} on {FIRST} (token {lease.token})."
    ]
    assert redis_client.exists(lock_key(FIRST)) == 0
    assert redis_client.exists(lock_key(KNOWN)) == 1
    event = FenceEvent.objects.get(outcome=Outcome.BROKEN)
    assert (event.resource, event.token, event.actor, event.scope, event.operation, event.ip) == (
        FIRST,
        lease.token,
        f"cli:{getpass.getuser()}",
        "",  # no attempt recorded yet: no scope
        "break-lease",
        None,
    )
    assert event.detail.startswith(f"lease of {holder_label('first-worker')} since ")
    assert event.detail.endswith(" broken: first-worker hangs")


@pytest.mark.django_db
def test_locks_break_records_the_resources_scope_and_answers_json(stuck, redis_client):
    """The shell sees every scope; the audit row still names the resource's own (here
    locking's default: the scope of its latest recorded attempt)."""
    record_fence_event(resource=KNOWN, outcome=Outcome.BUSY, token=7, scope="org:2")

    token = str(stuck[KNOWN].token)
    [line] = locks("break", KNOWN, "--token", token, "--reason", "stuck", "--json")

    item = json.loads(line)
    assert (item["kind"], item["resource"], item["token"], item["owner"]) == (
        "broken",
        KNOWN,
        stuck[KNOWN].token,
        stuck[KNOWN].owner,
    )
    assert FenceEvent.objects.get(outcome=Outcome.BROKEN).scope == "org:2"
    assert redis_client.exists(lock_key(KNOWN)) == 0


@pytest.mark.django_db
def test_locks_break_of_a_resource_nobody_holds_says_so_and_records_nothing(fence_lock):
    assert locks("break", "job:idle", "--token", "3", "--reason", "looked stuck") == [
        "Nothing to break: no lease is held on job:idle."
    ]
    [line] = locks("break", "job:idle", "--token", "3", "--reason", "looked stuck", "--json")
    assert json.loads(line) == {"kind": "not_held", "resource": "job:idle"}
    assert not FenceEvent.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("break", "has space", "--reason", "x"), "'has space' is not a resource name"),
        (("break", "job:{x}", "--reason", "x"), "'job:{x}' is not a resource name"),
        (("break", FIRST), 'locks break needs --reason "…"'),
        (("break", FIRST, "--reason", "  "), 'locks break needs --reason "…"'),
        (("break",), "locks break needs the RESOURCE"),
        (("break", FIRST, "--reason", "x"), "locks break needs --token N"),
        (("break", FIRST, "--reason", "x", "--token", "seven"), "--token must be a whole number"),
        (("break", FIRST, "--reason", "x", "--token", "-3"), "--token must be a whole number"),
        (("list", "--reason", "x"), "--reason and --token go with `locks break` or"),
        (("list", "--token", "1"), "--reason and --token go with `locks break` or"),
        (("--attempts", "-1"), "--attempts must be a whole number of at least 0"),
        (("--attempts", "many"), "--attempts must be a whole number of at least 0"),
    ],
)
def test_bad_input_is_a_command_error_and_breaks_nothing(stuck, redis_client, args, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        locks(*args)
    assert redis_client.exists(lock_key(FIRST)) == 1
    assert not FenceEvent.objects.filter(outcome=Outcome.BROKEN).exists()


# --- as the shell runs it: exit codes and one line ------------------------------------------


def run_locks(*args, env) -> tuple[int, list[str], list[str]]:
    done = run_django("locks", *args, env=env)
    return done.returncode, done.stdout.splitlines(), done.stderr.splitlines()


def test_from_the_shell_a_break_exits_0_and_nothing_held_exits_0_saying_so(
    subprocess_env, fence_lock, redis_client
):
    lease = fence_lock.acquire(FIRST, ttl=STUCK, holder="first-worker")

    token = str(lease.token)
    broke = run_locks("break", FIRST, "--token", token, "--reason", "hung", env=subprocess_env)
    again = run_locks("break", FIRST, "--token", token, "--reason", "hung", env=subprocess_env)

    # (stderr may carry the project's log records, e.g. INFO "fenced attempt broken")
    assert broke[:2] == (
        0,
        [f"Broke the lease of {holder_label('first-worker')} on {FIRST} (token {lease.token})."],
    )
    assert again[:2] == (0, [f"Nothing to break: no lease is held on {FIRST}."])
    assert not [line for line in broke[2] + again[2] if "Error" in line or "Traceback" in line]
    assert redis_client.exists(lock_key(FIRST)) == 0
    assert FenceEvent.objects.get().actor == f"cli:{getpass.getuser()}"


def test_from_the_shell_a_break_of_a_lease_taken_over_since_exits_75_naming_the_new_holder(
    subprocess_env, fence_lock, redis_client
):
    """Issue 44, item 4: ``locks break`` deleted whoever held the resource when it ran, a
    healthy holder that had taken over since the operator listed the stuck one included."""
    listed = fence_lock.acquire(FIRST, ttl=STUCK, holder="stuck-worker")
    listed.release()  # it finished after all; a healthy worker takes over
    healthy = fence_lock.acquire(FIRST, ttl=STUCK, holder="healthy-worker")

    status, out, err = run_locks(
        "break", FIRST, "--token", str(listed.token), "--reason", "hung", env=subprocess_env
    )

    assert (status, out) == (75, [])
    [line] = [line for line in err if line.startswith("CommandError: ")]
    assert line == (
        f"CommandError: The lease on {FIRST} is now held by {holder_label('healthy-worker')} "
        f"(token {healthy.token}), not the lease you were shown (token {listed.token}): "
        "nothing was broken."
    )
    assert redis_client.get(lock_key(FIRST)).decode().startswith(healthy.owner + "|")
    assert not FenceEvent.objects.filter(outcome=Outcome.BROKEN).exists()
    refused = FenceEvent.objects.get()
    assert (refused.outcome, refused.token, refused.operation) == (
        "conflict",
        healthy.token,
        "break-lease",
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("break", "has space", "--reason", "x"), "CommandError: 'has space' is not a resource"),
        (("break", FIRST), 'CommandError: locks break needs --reason "…"'),
        (("break", FIRST, "--reason"), "CommandError: argument --reason: expected one argument"),
        (("frob",), "CommandError: argument action: invalid choice: 'frob'"),
        (("--colour",), "CommandError: unrecognized arguments: --colour"),
    ],
)
def test_from_the_shell_bad_input_exits_1_with_one_line(
    subprocess_env, fence_lock, redis_client, args, line
):
    fence_lock.acquire(FIRST, ttl=STUCK, holder="first-worker")

    status, out, err = run_locks(*args, env=subprocess_env)

    assert (status, out, len(err)) == (1, [], 1), err
    assert err[0].startswith(line), err
    assert redis_client.exists(lock_key(FIRST)) == 1


@pytest.mark.parametrize(
    "args", [(), ("--json",), ("break", FIRST, "--token", "1", "--reason", "hung")]
)
def test_from_the_shell_redis_down_exits_1_with_one_line(subprocess_env, args):
    env = {**subprocess_env, "LOCK_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}

    status, out, err = run_locks(*args, env=env)

    assert (status, out, len(err)) == (1, [], 1), err
    assert err[0].startswith("CommandError: Redis is unreachable: "), err
    assert "Traceback" not in err[0]
    assert not FenceEvent.objects.exists()
