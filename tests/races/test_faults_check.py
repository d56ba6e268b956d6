"""``python -m tests.faults.check``: the fault suite's history checker as a command, for a
history another harness recorded (``make bench-load``'s busiest hour imports nothing of
the tests). Each request gets the verdict the suite's own clients give it."""

import json
import sys
import time

import pytest

from hoa.models import Complaint
from tests.harness.processes import run_child
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)


def _lines(path, records) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def _check(tmp_path, env, history, calls=()):
    command = [sys.executable, "-m", "tests.faults.check", _lines(tmp_path / "history", history)]
    command += ["--received", _lines(tmp_path / "calls", calls)]
    return run_child(command, env=env, timeout=120)


def _assign(maple, complaint, vendor, **told) -> dict:
    return {
        "kind": "assign", "org": maple.slug, "org_id": maple.pk, "client": "alice",
        "user": "alice", "via": "http:a", "complaint": complaint.pk, "vendor": vendor.pk,
        "reassign": False, **told,
    }  # fmt: skip


def _calls(stub) -> list[dict]:
    return [
        {"path": r.path, "key": r.idempotency_key, "token": r.token, "status": r.status,
         "verdict": r.verdict}
        for r in stub.received
    ]  # fmt: skip


def test_a_history_that_the_database_bears_out_passes(
    tmp_path, subprocess_env, maple, alice, pipe, green, dispatch
):
    complaint = Complaint.objects.create(organization=maple, title="Dripping tap")
    started = time.time()
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    done = _assign(maple, complaint, pipe, started=started, ended=time.time(), status=303,
                   message_tags="success")  # fmt: skip
    # Another request for the other vendor, told "assigned to another" (409): it wrote nothing.
    refused = _assign(maple, complaint, green, started=time.time(), ended=time.time(),
                      status=409, title="Complaint already has a vendor")  # fmt: skip

    result = _check(tmp_path, subprocess_env, [done, refused], _calls(dispatch))

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "2 operations (1 done, 1 refused), 1 external calls",
        "0 invariant violations",
    ]


def test_a_user_told_done_whose_write_is_not_there_is_a_violation(
    tmp_path, subprocess_env, maple, pipe
):
    complaint = Complaint.objects.create(organization=maple, title="Dripping tap")
    told = _assign(maple, complaint, pipe, started=time.time() - 1, ended=time.time(),
                   status=303, message_tags="success")  # fmt: skip

    result = _check(tmp_path, subprocess_env, [told])

    assert result.returncode == 1
    assert (
        f"VIOLATION vendor-assignment:complaint:{complaint.pk}: alice was told vendor "
        f"{pipe.pk} is assigned; no row of it"
    ) in result.stdout.splitlines()


def test_an_unread_message_is_a_success_of_either_kind(tmp_path, subprocess_env, maple, pipe):
    complaint = Complaint.objects.create(organization=maple, title="Dripping tap")
    unread = _assign(maple, complaint, pipe, started=time.time() - 1, ended=time.time(),
                     status=303)  # fmt: skip

    result = _check(tmp_path, subprocess_env, [unread])

    # "succeeded": done or already done. Neither left a row, so either way it is a lie.
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == "1 operations (1 succeeded), 0 external calls"
    assert "already handles it; it never did during that request" in result.stdout


def test_an_unreadable_history_exits_1_in_one_line(tmp_path, subprocess_env):
    (tmp_path / "history").write_text("{not json\n")

    result = run_child(
        [sys.executable, "-m", "tests.faults.check", str(tmp_path / "history")],
        env=subprocess_env, timeout=60,
    )  # fmt: skip

    assert (result.returncode, result.stdout) == (1, "")
    [line] = result.stderr.splitlines()
    assert line.startswith("cannot read the history: ")
