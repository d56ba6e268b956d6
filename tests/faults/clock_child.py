"""A lock client whose wall clock the harness moves (scenario 7), driven over stdin.

One JSON object per line in, one per line out::

    {"do": "acquire", "resource": "...", "ttl": 2.0}  -> {"granted": true, "token": 7, ...}
                                                        or {"held": true, "holder": "..."}
    {"do": "jump", "seconds": 3600}                   -> the wall clock moves by that much
    {"do": "status"}                                  -> {"probably_valid": true, ...}
    {"do": "write", "complaint": 12}                  -> {"written": true}
                                                        or {"stale": true, "recorded": 8}
    {"do": "release"}                                 -> {"released": false}

Every answer carries ``wall`` (this process's idea of the time). How the clock moves:

- ``FAULTS_CLOCK=libfaketime``: the harness preloads libfaketime, which moves
  CLOCK_REALTIME for the whole process (C code included) and, with
  ``FAKETIME_DONT_FAKE_MONOTONIC=1``, leaves CLOCK_MONOTONIC alone, as a real clock step
  (NTP, an operator, a VM resume) does. ``jump`` rewrites its timestamp file. This child
  never sleeps: libfaketime 0.9.10 breaks absolute monotonic sleeps in that mode.
- ``FAULTS_CLOCK=python``: ``time.time`` and ``datetime.now`` are replaced in this process
  only (when libfaketime is not installed).
"""

import datetime as _datetime
import json
import os
import sys
import time

_offset = [0.0]
_real_time = time.time
_RealDatetime = _datetime.datetime


def _install_python_clock() -> None:
    """Shift ``time.time`` and ``datetime.now`` by ``_offset`` (before Django is imported)."""

    def fake_time() -> float:
        return _real_time() + _offset[0]

    class _Meta(type):
        def __instancecheck__(cls, instance):
            return isinstance(instance, _RealDatetime)

    class FakeDatetime(_RealDatetime, metaclass=_Meta):
        @classmethod
        def now(cls, tz=None):
            return _RealDatetime.fromtimestamp(fake_time(), tz)

    time.time = fake_time
    time.time_ns = lambda: int(fake_time() * 1_000_000_000)
    _datetime.datetime = FakeDatetime


def _jump(seconds: float) -> None:
    _offset[0] += seconds
    stamp_file = os.environ.get("FAKETIME_TIMESTAMP_FILE")
    if os.environ.get("FAULTS_CLOCK") == "libfaketime" and stamp_file:
        with open(stamp_file, "w") as handle:
            handle.write(f"{_offset[0]:+.0f}\n")


def main() -> None:
    if os.environ.get("FAULTS_CLOCK") == "python":
        _install_python_clock()
    import django

    django.setup()
    from datetime import UTC, datetime, timedelta

    from django.db import transaction

    from hoa.models import Complaint
    from locking import FenceLock, LockHeld, StaleFencingToken, advance_fence

    lock = FenceLock()
    lease = None
    for line in sys.stdin:
        command = json.loads(line)
        action = command["do"]
        reply: dict = {}
        if action == "acquire":
            try:
                lease = lock.acquire(
                    command["resource"], ttl=timedelta(seconds=command["ttl"]), holder="clock"
                )
                reply = {
                    "granted": True,
                    "token": lease.token,
                    "expires_at": lease.expires_at.isoformat(),
                }
            except LockHeld as exc:
                reply = {"held": True, "holder": exc.holder, "token": exc.token}
        elif action == "jump":
            _jump(float(command["seconds"]))
        elif action == "status":
            reply = {"probably_valid": lease.probably_valid if lease else False}
        elif action == "write":
            try:
                with transaction.atomic():
                    advance_fence(Complaint.objects.filter(pk=command["complaint"]), lease)
                reply = {"written": True}
            except StaleFencingToken as exc:
                reply = {"stale": True, "recorded": exc.recorded}
        elif action == "release":
            reply = {"released": lease.release() if lease else False}
        elif action == "quit":
            break
        reply["wall"] = datetime.now(tz=UTC).isoformat()
        reply["pid"] = os.getpid()
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
