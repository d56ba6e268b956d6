"""Observability for many hosts: the Prometheus endpoint, its multiprocess mode, JSON logs,
and ``scripts/serve.sh`` running several gunicorn instances.

Outcomes are driven through ``run_fenced`` against the real Redis and PostgreSQL. Each test
uses an operation label of its own, so the process-wide counters give exact values.
"""

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from http.client import HTTPConnection
from pathlib import Path

import pytest
import redis
from django.db import transaction
from prometheus_client.parser import text_string_to_metric_families
from redis.backoff import NoBackoff
from redis.retry import Retry

from hoa.models import Complaint, ComplaintEvent
from hoa.ops.logging import JsonFormatter
from locking import (
    FenceLock,
    LockHeld,
    LockUnavailable,
    Outcome,
    StaleFencingToken,
    advance_fence,
    run_fenced,
)
from locking.audit import Attempt
from locking.epochs import first_token
from locking.keys import lock_key
from tests.harness.net import free_consecutive_ports, free_port
from tests.harness.processes import BASE_DIR, run_child
from tests.harness.waiting import wait_until
from tests.topologies import Child

TTL = timedelta(seconds=30)


class BillingDown(Exception):
    """Stands in for the external system's failure."""

    outcome = Outcome.FAILED


class StateChanged(Exception):
    """Stands in for a compare-and-swap refusal: what the caller saw changed meanwhile."""

    outcome = Outcome.CONFLICT


@pytest.fixture
def operation():
    return f"metrics-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Noisy pump")


def fenced_note(complaint):
    def work(lease):
        with transaction.atomic():
            advance_fence(Complaint.objects.filter(pk=complaint.pk), lease)
            ComplaintEvent.objects.create(complaint=complaint, kind="note", detail="fixed")
        return lease.token

    return work


def scrape(client, **headers) -> tuple[int, dict[tuple[str, tuple], float], str]:
    """GET /metrics: (status, {(sample name, sorted labels): value}, body)."""
    response = client.get("/metrics", **headers)
    body = response.content.decode()
    samples = {}
    if response.status_code == 200:
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return response.status_code, samples, body


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.django_db(transaction=True)
def test_metrics_endpoint_counts_busy_stale_and_committed_attempts_by_operation(
    client, complaint, operation, fence_lock, redis_client
):
    resource = f"vendor-assignment:complaint:{complaint.pk}"
    attempt = Attempt(actor="alice", operation=operation)

    holder = fence_lock.acquire(resource, ttl=TTL, holder="bob")
    with pytest.raises(LockHeld):
        run_fenced(resource, fenced_note(complaint), ttl=TTL, attempt=attempt)
    holder.release()

    def overtaken_then_write(lease):
        # This holder pauses past its 200 ms lease; a newer holder takes over and commits.
        wait_until(lambda: not redis_client.exists(lock_key(resource)), what="lease expiry")
        with fence_lock.acquire(resource, ttl=TTL) as newer, transaction.atomic():
            advance_fence(Complaint.objects.filter(pk=complaint.pk), newer)
        return fenced_note(complaint)(lease)

    with pytest.raises(StaleFencingToken):
        run_fenced(resource, overtaken_then_write, ttl=timedelta(milliseconds=200), attempt=attempt)
    run_fenced(resource, fenced_note(complaint), ttl=TTL, attempt=attempt)

    status, samples, body = scrape(client)
    assert status == 200
    assert value(samples, "fence_busy_total", operation=operation) == 1
    assert value(samples, "fence_stale_rejections_total", operation=operation) == 1
    assert value(samples, "fence_lease_acquisitions_total", operation=operation) == 2
    for outcome in ("busy", "stale", "committed"):
        count = "fenced_operation_duration_seconds_count"
        assert value(samples, count, operation=operation, outcome=outcome) == 1, outcome
    assert resource not in body  # never a label: one time series per resource would explode


@pytest.mark.django_db(transaction=True)
def test_metrics_count_reseeds_call_failures_conflicts_and_an_unreachable_redis(
    client, complaint, operation
):
    resource = f"vendor-assignment:complaint:{complaint.pk}"
    attempt = Attempt(actor="alice", operation=operation)
    # Redis lost the counter (restart without persistence): the database is at 41.
    Complaint.objects.filter(pk=complaint.pk).update(last_fence_token=41)
    # No epoch recorded yet (an upgrade): epoch 0's token 1 is refused, epoch 1 commits.
    token = run_fenced(resource, fenced_note(complaint), ttl=TTL, attempt=attempt)
    assert token == first_token(1) + 1

    def billing_down(lease):
        raise BillingDown("billing webhook answered 503")

    with pytest.raises(BillingDown):
        run_fenced(resource, billing_down, ttl=TTL, attempt=attempt)

    def seen_state_changed(lease):
        raise StateChanged("another assignment became active since the caller looked")

    with pytest.raises(StateChanged):
        run_fenced(resource, seen_state_changed, ttl=TTL, attempt=attempt)
    unreachable = redis.Redis(
        host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    with pytest.raises(LockUnavailable):
        run_fenced(
            resource,
            fenced_note(complaint),
            ttl=TTL,
            attempt=attempt,
            lock=FenceLock(client=unreachable),
        )

    status, samples, _body = scrape(client)
    assert status == 200
    assert value(samples, "fence_counter_reseeds_total", operation=operation) == 1
    # The rejection that revealed the lost counter is a reseed, not a stale holder.
    assert value(samples, "fence_stale_rejections_total", operation=operation) == 0
    assert value(samples, "fence_external_call_failures_total", operation=operation) == 1
    assert value(samples, "fence_conflicts_total", operation=operation) == 1
    assert value(samples, "fence_lock_unavailable_total", operation=operation) == 1
    # The reseeded attempt's two grants, the failed call's and the conflict's.
    assert value(samples, "fence_lease_acquisitions_total", operation=operation) == 4
    count = "fenced_operation_duration_seconds_count"
    assert value(samples, count, operation=operation, outcome="committed") == 1
    assert value(samples, count, operation=operation, outcome="failed") == 1
    assert value(samples, count, operation=operation, outcome="conflict") == 1


# An allowed scrape reads the database (the month start's scrape-time counts).
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("allowed", "token", "address", "headers", "status"),
    [
        pytest.param(None, "", "127.0.0.1", {}, 200, id="loopback"),
        pytest.param(None, "", "203.0.113.9", {}, 403, id="other-address"),
        pytest.param(
            None, "", "127.0.0.1", {"HTTP_X_FORWARDED_FOR": "203.0.113.9"}, 403, id="via-proxy"
        ),
        pytest.param(
            None, "s3cret", "203.0.113.9", {"HTTP_AUTHORIZATION": "Bearer s3cret"}, 200, id="token"
        ),
        pytest.param(None, "s3cret", "203.0.113.9", {}, 401, id="token-missing"),
        pytest.param(
            None, "s3cret", "127.0.0.1", {"HTTP_AUTHORIZATION": "Bearer wrong"}, 401, id="bad-token"
        ),
        pytest.param(
            None, "", "203.0.113.9", {"HTTP_AUTHORIZATION": "Bearer guess"}, 403, id="no-token-set"
        ),
        pytest.param(["10.0.0.0/8"], "", "10.1.2.3", {}, 200, id="allowed-network"),
        pytest.param(["10.0.0.0/8"], "", "127.0.0.1", {}, 403, id="loopback-not-listed"),
    ],
)
def test_metrics_endpoint_answers_only_allowed_addresses_or_the_bearer_token(
    client, settings, allowed, token, address, headers, status
):
    if allowed is not None:
        settings.METRICS_ALLOWED_IPS = allowed
    settings.METRICS_TOKEN = token
    response = client.get("/metrics", REMOTE_ADDR=address, **headers)

    assert response.status_code == status
    body = response.content.decode()
    if status == 200:
        assert response["Content-Type"].startswith("text/plain; version=")
    else:
        assert "fence_" not in body
        assert body == "Metrics are served to the monitoring system only.\n"
    if status == 401:
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'


def test_metrics_endpoint_refuses_writes(client):
    assert client.post("/metrics").status_code == 405


@pytest.mark.slow
def test_multiprocess_mode_adds_up_the_counts_of_every_worker_process(
    client, settings, subprocess_env, fence_lock, operation, tmp_path
):
    resource = "monthly-charges:org:1:2026-03"
    holder = fence_lock.acquire(resource, ttl=TTL, holder="bob")
    env = {**subprocess_env, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    workers = [Child("busy", resource, operation, env=env) for _ in range(2)]
    try:
        for worker in workers:
            assert worker.expect("busy") == f"busy {holder.token}"
            assert worker.finish() == 0
    finally:
        for worker in workers:
            worker.stop()
        holder.release()

    # What /metrics serves under gunicorn: the sum of the files every worker wrote.
    settings.PROMETHEUS_MULTIPROC_DIR = str(tmp_path)
    status, samples, _body = scrape(client)
    assert status == 200
    assert value(samples, "fence_busy_total", operation=operation) == 2
    count = "fenced_operation_duration_seconds_count"
    assert value(samples, count, operation=operation, outcome="busy") == 2


def test_json_formatter_writes_one_object_with_the_extra_fields():
    record = logging.LogRecord(
        "locking.audit", logging.INFO, __file__, 1, "fenced %s", ("x",), None
    )
    for name, field_value in {"resource": "vendor-assignment:complaint:7", "token": 12}.items():
        setattr(record, name, field_value)
    record.outcome = "stale"

    line = JsonFormatter().format(record)

    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "fenced x"
    assert entry["level"] == "INFO"
    assert entry["logger"] == "locking.audit"
    assert (entry["resource"], entry["token"], entry["outcome"]) == (
        "vendor-assignment:complaint:7",
        12,
        "stale",
    )
    assert "args" not in entry and "msg" not in entry  # LogRecord internals stay out


@pytest.mark.slow
def test_log_format_json_makes_fenced_attempts_log_json_lines(
    subprocess_env, fence_lock, operation
):
    resource = "monthly-charges:org:1:2026-04"
    holder = fence_lock.acquire(resource, ttl=TTL, holder="bob")
    env = {**subprocess_env, "LOG_FORMAT": "json", "LOG_LEVEL": "INFO"}
    child = Child("busy", resource, operation, env=env)
    try:
        assert child.expect("busy") == f"busy {holder.token}"
        assert child.finish() == 0
        stderr = child.stderr()
    finally:
        child.stop()
        holder.release()

    entries = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    audit = [e for e in entries if e["logger"] == "locking.audit"]
    assert len(audit) == 1
    assert audit[0]["message"] == "fenced attempt busy"
    assert (audit[0]["resource"], audit[0]["token"], audit[0]["outcome"]) == (
        resource,
        holder.token,
        "busy",
    )


# -- scripts/serve.sh ----------------------------------------------------------------------


def http_get(port: int, path: str, **headers) -> int:
    connection = HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def serve(command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_child(
        ["bash", str(BASE_DIR / "scripts" / "serve.sh"), command], env=env, timeout=120
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_serve_runs_several_gunicorn_instances_on_consecutive_ports_and_stops_them(tmp_path):
    run_dir = tmp_path / "gunicorn"
    first = free_consecutive_ports(2)
    env = {
        **os.environ,
        "INSTANCES": "2",
        "PORT": str(first),
        "WEB_CONCURRENCY": "2",
        "GUNICORN_RUN_DIR": str(run_dir),
        "DEBUG": "0",
        "SECURE_SSL_REDIRECT": "0",
        "ALLOWED_HOSTS": "127.0.0.1",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    pids: list[int] = []
    try:
        started = serve("start", env)
        assert started.returncode == 0, started.stderr
        pids = [int((run_dir / f"{port}.pid").read_text()) for port in (first, first + 1)]
        assert all(alive(pid) for pid in pids)
        for port in (first, first + 1):
            assert http_get(port, "/healthz") == 200
            assert http_get(port, "/metrics") == 200
            assert http_get(port, "/metrics", **{"X-Forwarded-For": "203.0.113.9"}) == 403
            # Each instance has its own Prometheus multiprocess directory.
            assert (run_dir / f"prometheus-{port}").is_dir()
        status = serve("status", env)
        assert status.stdout.splitlines() == [
            f"gunicorn 127.0.0.1:{first}: up (pid {pids[0]})",
            f"gunicorn 127.0.0.1:{first + 1}: up (pid {pids[1]})",
        ]
        again = serve("start", env)
        assert again.returncode == 0
        assert f"127.0.0.1:{first} already served by gunicorn pid {pids[0]}" in again.stderr

        stopped = serve("stop", env)
        assert stopped.returncode == 0, stopped.stderr
        wait_until(lambda: not any(alive(pid) for pid in pids), what="gunicorn to exit")
        assert not list(run_dir.glob("*.pid"))
        assert serve("status", env).stdout == "gunicorn: not running\n"
    finally:
        for pid in pids:  # only if the script failed to stop them
            if alive(pid):
                os.kill(pid, 15)
                time.sleep(0.5)


def test_serve_refuses_a_bad_instance_count_and_starts_nothing(tmp_path):
    env = {**os.environ, "INSTANCES": "two", "GUNICORN_RUN_DIR": str(tmp_path / "run")}
    result = serve("start", env)
    assert result.returncode == 1
    assert result.stderr == "[serve] error: INSTANCES must be a positive number, got 'two'\n"
    assert not Path(tmp_path / "run").exists()


def test_gunicorn_conf_turns_on_multiprocess_metrics_before_workers_import_the_library(tmp_path):
    # What a gunicorn master does: run the config file; its forked workers then import
    # prometheus-client, which picks its mode at import. Here one process does both.
    probe = (
        "import os, runpy; runpy.run_path('gunicorn.conf.py');"
        " from prometheus_client import values;"
        " print(values.ValueClass.__name__, os.environ['PROMETHEUS_MULTIPROC_DIR'])"
    )
    env = {**os.environ, "PORT": "8123", "GUNICORN_RUN_DIR": str(tmp_path)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    result = run_child([sys.executable, "-c", probe], env=env)
    assert result.returncode == 0, result.stderr
    # MmapedValue is the multiprocess value class; MutexValue would count per process.
    assert result.stdout.split() == ["MmapedValue", str(tmp_path / "prometheus-8123")]
