"""Helpers for the scheduled-job tests: threads with their own connections, hold points
PostgreSQL enforces, and what PostgreSQL says about who holds and who waits.

Hold points are real locks, not hooks in the code under test: a job that reaches one
blocks inside its pass (holding its advisory lock) until the test lets go, and the test
sees it waiting in ``pg_stat_activity``.
"""

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from hoa.models import Complaint, Notice, Organization
from locking.advisory import advisory_key


@contextmanager
def worker_threads(count: int) -> Iterator[Callable[..., Future]]:
    """Yield ``submit(fn, *args)``: run ``fn`` in a thread with its own DB connection."""

    def on_own_connection(fn, args, kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        yield lambda fn, *args, **kwargs: pool.submit(on_own_connection, fn, args, kwargs)


def advisory_lock_holders(name: str) -> list[tuple[int, str]]:
    """Return (pid, application_name) of the backends holding the advisory lock ``name``."""
    # pg_locks shows a bigint advisory key as its high and low 32 bits, objsubid 1.
    key = advisory_key(name) & 0xFFFF_FFFF_FFFF_FFFF
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # fresh activity inside a transaction
        cursor.execute(
            """
            SELECT l.pid, a.application_name
            FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
              AND l.classid = %s AND l.objid = %s
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """,
            [key >> 32, key & 0xFFFF_FFFF],
        )
        return cursor.fetchall()


def backends_waiting(query_prefix: str, *, application_name: str | None = None) -> list[int]:
    """Return pids of backends blocked on a lock while running a query starting so."""
    sql = """
        SELECT pid FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE %s
    """
    params = [query_prefix + "%"]
    if application_name is not None:
        sql += " AND application_name = %s"
        params.append(application_name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(sql, params)
        return [pid for (pid,) in cursor.fetchall()]


def backends_of(application_name: str) -> list[int]:
    """Return pids of this database's backends opened with ``application_name``."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [application_name],
        )
        return [pid for (pid,) in cursor.fetchall()]


@contextmanager
def table_locked(table: str) -> Iterator[None]:
    """Hold ``table`` in SHARE mode: reads and row locks pass, INSERT/UPDATE wait for us."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f'LOCK TABLE "{table}" IN SHARE MODE')
        yield


class RecordList(logging.Handler):
    """Collect log records (from any thread)."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock = threading.Lock()

    def emit(self, record):
        with self._lock:
            self.records.append(record)


@contextmanager
def captured_log(logger_name: str) -> Iterator[RecordList]:
    """Capture ``logger_name``'s records; the project loggers do not propagate to root."""
    handler = RecordList()
    logger = logging.getLogger(logger_name)
    previous_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)


def make_overdue(organization: Organization, count: int, *, now: datetime | None = None):
    """Bulk-create ``count`` open complaints already past their SLA, oldest deadline first."""
    now = now or timezone.now()
    return Complaint.objects.bulk_create(
        Complaint(
            organization=organization,
            title=f"Overdue {number:05d}",
            opened_at=now - timedelta(days=30),
            sla_due_at=now - timedelta(days=10) + timedelta(seconds=number),
        )
        for number in range(count)
    )


def make_due_notices(organization: Organization, count: int, *, now: datetime | None = None):
    """Bulk-create ``count`` notices whose publish time has passed, earliest first."""
    now = now or timezone.now()
    return Notice.objects.bulk_create(
        Notice(
            organization=organization,
            title=f"Notice {number:03d}",
            publish_at=now - timedelta(hours=1) + timedelta(seconds=number),
        )
        for number in range(count)
    )
