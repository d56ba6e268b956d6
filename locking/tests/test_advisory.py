"""PostgreSQL advisory locks for scheduled jobs: stable keys, exclusion, release at COMMIT."""

import hashlib
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError

from locking.advisory import advisory_key, advisory_lock
from locking.tests.support import SOURCE_ROOT

NAME = "hoa:sla-sweep"
WAIT = 10  # seconds: upper bound for every wait in this module

# Print advisory_key(name) and the salted built-in hash(name) of a fresh interpreter.
CHILD = (
    "import sys; from locking.advisory import advisory_key; "
    "print(advisory_key(sys.argv[1]), hash(sys.argv[1]))"
)


def key_in_child(name: str, hash_seed: str) -> tuple[int, int]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, name],
        cwd=SOURCE_ROOT,
        env={"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key, builtin_hash = result.stdout.split()
    return int(key), int(builtin_hash)


def test_advisory_key_is_the_same_in_processes_with_different_hash_seeds():
    first_key, first_hash = key_in_child(NAME, "1")
    second_key, second_hash = key_in_child(NAME, "2")

    assert first_hash != second_hash  # the seeds did take effect on hash()
    assert first_key == second_key == advisory_key(NAME)


def test_advisory_key_is_the_documented_blake2b_hash_as_a_signed_64_bit_integer():
    digest = hashlib.blake2b(NAME.encode("utf-8"), digest_size=8).digest()
    assert advisory_key(NAME) == int.from_bytes(digest, "big", signed=True)
    # Pinned: a changed hash would let an old and a new deployment run the same job at once.
    assert advisory_key(NAME) == 63359494463523174
    assert advisory_key("sla_sweep") == -3815804693659369307
    assert -(2**63) <= advisory_key("x" * 1000) < 2**63
    assert advisory_key("a") != advisory_key("b")


def test_empty_advisory_lock_name_is_refused():
    with pytest.raises(ValueError, match="must not be empty"):
        advisory_key("")


@pytest.mark.django_db(transaction=True)
def test_advisory_lock_outside_atomic_raises():
    with (
        pytest.raises(TransactionManagementError, match=r"inside transaction\.atomic"),
        advisory_lock(NAME),
    ):
        pass


def held_by_backends(name: str) -> list[int]:
    """Return the pids holding the advisory lock ``name`` (pg_locks splits the key in two)."""
    key = advisory_key(name) & 0xFFFF_FFFF_FFFF_FFFF
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid = %s AND objsubid = 1 "
            # pg_locks spans the server; other test runs use other databases.
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [key >> 32, key & 0xFFFF_FFFF],
        )
        return [row[0] for row in cursor.fetchall()]


class Holder(threading.Thread):
    """Take the advisory lock in another connection and keep it until told to end."""

    def __init__(self, name: str, *, roll_back: bool = False):
        super().__init__(name=f"holder-{name}")
        self.lock_name, self.roll_back = name, roll_back
        self.barrier = threading.Barrier(2)
        self.holding = threading.Event()
        self.finish = threading.Event()
        self.acquired: bool | None = None
        self.backend_pid: int | None = None
        self.error: BaseException | None = None

    def run(self):
        try:
            self.barrier.wait(WAIT)
            with transaction.atomic(), advisory_lock(self.lock_name) as acquired:
                self.acquired = acquired
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    self.backend_pid = cursor.fetchone()[0]
                self.holding.set()
                assert self.finish.wait(WAIT)
                if self.roll_back:
                    raise RuntimeError("job failed: roll back")
        except RuntimeError:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            self.holding.set()
            connection.close()


def start_holder(name: str, **kwargs) -> Holder:
    holder = Holder(name, **kwargs)
    holder.start()
    holder.barrier.wait(WAIT)
    assert holder.holding.wait(WAIT)
    assert holder.error is None, holder.error
    return holder


def try_lock(name: str, wait: timedelta | None = None) -> bool:
    with transaction.atomic(), advisory_lock(name, wait=wait) as acquired:
        return acquired


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("roll_back", [False, True], ids=["commit", "rollback"])
def test_advisory_lock_excludes_another_connection_until_its_transaction_ends(roll_back):
    holder = start_holder(NAME, roll_back=roll_back)
    try:
        assert holder.acquired is True
        assert held_by_backends(NAME) == [holder.backend_pid]  # the documented key is locked
        assert try_lock(NAME) is False
        assert try_lock("hoa:publish-notices") is True  # other names are independent
    finally:
        holder.finish.set()
        holder.join(WAIT)

    assert holder.error is None
    assert held_by_backends(NAME) == []
    assert try_lock(NAME) is True


@pytest.mark.django_db(transaction=True)
def test_advisory_lock_is_released_when_our_own_transaction_ends():
    with transaction.atomic(), advisory_lock(NAME) as acquired:
        assert acquired is True
        assert held_by_backends(NAME) == [own_backend_pid()]  # pg_backend_pid(): PgBouncer-safe
    assert held_by_backends(NAME) == []


def own_backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_advisory_lock_wait_polls_until_the_holder_commits():
    holder = start_holder(NAME)
    result: dict = {}

    tried = threading.Event()

    def note_tries(execute, sql, params, many, context):
        # Django's own hook on the waiter's connection: the waiter's first try has been
        # answered (refused: the holder still holds). Works the same through PgBouncer,
        # where backend pids and pg_stat_activity rows are shared between clients.
        answer = execute(sql, params, many, context)
        if "pg_try_advisory_xact_lock" in sql:
            tried.set()
        return answer

    def waiter():
        try:
            with connection.execute_wrapper(note_tries):
                result["acquired"] = try_lock(NAME, wait=timedelta(seconds=WAIT))
        finally:
            connection.close()

    thread = threading.Thread(target=waiter)
    try:
        assert try_lock(NAME, wait=timedelta(milliseconds=200)) is False  # gives up in time
        thread.start()
        # The waiter has tried (and failed: the holder still holds) before the holder ends.
        assert tried.wait(WAIT), "the waiter never tried the advisory lock"
        assert "acquired" not in result
        holder.finish.set()
        holder.join(WAIT)
        thread.join(WAIT)
    finally:
        holder.finish.set()
    assert result == {"acquired": True}
