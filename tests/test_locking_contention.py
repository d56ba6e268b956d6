"""No overlap under contention: 8 real processes take turns on one resource.

Each worker process repeatedly acquires the lease (waiting for it), records the monotonic
start and end of its critical section (``time.monotonic`` is one system-wide clock on Linux,
so processes can be compared), advances the fence on one database row inside the section,
and releases. The TTL is far longer than any section, so leases never expire: the lease
alone must then give mutual exclusion, and the tokens must follow the order of the sections.
"""

import itertools
import json
import subprocess
import sys

import pytest

from hoa.models import Complaint
from tests.harness.processes import start_child

WORKERS = 8
ATTEMPTS = 12  # per worker
RESOURCE = "vendor-assignment:complaint:contention"
WAIT = 120  # seconds: upper bound for the whole run

WORKER = """
import json, sys, time
from datetime import timedelta

import django

django.setup()
from django.db import transaction

from hoa.models import Complaint
from locking import FenceLock, advance_fence

pk, attempts, resource = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lock = FenceLock()
print("ready", flush=True)
sys.stdin.readline()  # the parent releases all workers at once
for _ in range(attempts):
    lease = lock.acquire(resource, ttl=timedelta(seconds=60), wait=timedelta(seconds=60))
    start = time.monotonic()
    with transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=pk), lease)
    time.sleep(0.002)  # widen the section so an overlap could not go unseen
    end = time.monotonic()
    released = lease.release()
    print(json.dumps({"start": start, "end": end, "token": lease.token, "released": released}),
          flush=True)
"""


def overlapping(sections: list[dict]) -> list[tuple[dict, dict]]:
    """Return neighbouring pairs (in start order) whose intervals overlap."""
    ordered = sorted(sections, key=lambda s: s["start"])
    return [(a, b) for a, b in itertools.pairwise(ordered) if b["start"] < a["end"]]


def test_overlap_check_detects_an_overlap():
    """Control: the check used below does find overlapping sections."""
    sections = [
        {"start": 1.0, "end": 2.0, "token": 1},
        {"start": 3.0, "end": 5.0, "token": 2},
        {"start": 4.0, "end": 6.0, "token": 3},
    ]
    assert overlapping(sections) == [(sections[1], sections[2])]


@pytest.mark.slow
def test_eight_processes_never_overlap_and_tokens_follow_section_order(subprocess_env, maple):
    complaint = Complaint.objects.create(organization=maple, title="contention")
    workers = [
        start_child(
            [sys.executable, "-c", WORKER, str(complaint.pk), str(ATTEMPTS), RESOURCE],
            env=subprocess_env,
            stdin=subprocess.PIPE,
        )
        for _ in range(WORKERS)
    ]
    try:
        for worker in workers:  # a barrier across processes: all set up, then all go
            assert worker.stdout.readline().strip() == "ready", worker.stderr.read()
        for worker in workers:
            worker.stdin.write("go\n")
            worker.stdin.flush()
        outputs = [worker.communicate(timeout=WAIT) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

    sections = []
    for worker, (stdout, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr
        sections.extend(json.loads(line) for line in stdout.splitlines())

    assert len(sections) == WORKERS * ATTEMPTS
    assert all(section["released"] for section in sections)  # no lease ever expired
    assert overlapping(sections) == []
    tokens = [s["token"] for s in sorted(sections, key=lambda s: s["start"])]
    assert tokens == list(range(1, WORKERS * ATTEMPTS + 1))
    complaint.refresh_from_db()
    assert complaint.last_fence_token == WORKERS * ATTEMPTS
