"""One client of the nemesis scenario (9): a real process looping over fenced writes.

The scenario starts several of these (``python -m tests.faults.nemesis_client …``) with
the app's environment; each has its own database connection, and all of them write one
row, under one lease, through ``locking`` alone::

    until stdin closes:
        t_request = time.monotonic()
        run_fenced(resource, work, ttl=…)     # grant, counter-loss recovery, audit, release
          work(lease): t_granted = time.monotonic()
                       tell the nemesis "granted"; hold the lease a little (the window in
                       which the nemesis freezes this process)
                       transaction.atomic():
                           advance_fence(<the row>, lease)
                           INSERT a history row (client, op, token, t_request, t_granted)
                       tell the nemesis "committed"
        t_ack = time.monotonic(); append the operation to this client's log

The work never skips a write because its lease looks expired: the fence alone must keep a
late write out, and that is what the scenario tests.

stdout carries the nemesis's events, one JSON object per line (``ready``, ``granted``,
``committed``, ``done``); the log file (JSON lines: op, t_request, t_granted, token,
outcome, t_ack) is this client's own record for the history checker. Closing stdin asks
the client to stop after its current operation.
"""

import argparse
import json
import os
import random
import sys
import threading
import time

# Created by the scenario before the clients start; its bigserial id is the commit order
# (see tests/faults/fence_history.py).
HISTORY_TABLE = "faults_nemesis_history"
CREATE_HISTORY = f"""
CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} (
    id bigserial PRIMARY KEY,
    run text NOT NULL,
    client integer NOT NULL,
    op integer NOT NULL,
    token bigint NOT NULL,
    t_request double precision NOT NULL,
    t_granted double precision NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
INSERT_HISTORY = (
    f"INSERT INTO {HISTORY_TABLE} (run, client, op, token, t_request, t_granted) "  # noqa: S608
    "VALUES (%s, %s, %s, %s, %s, %s)"
)


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tests.faults.nemesis_client")
    parser.add_argument("--client", type=int, required=True)
    parser.add_argument("--run", required=True, help="tags this run's history rows")
    parser.add_argument("--resource", required=True)
    parser.add_argument("--row", type=int, required=True, help="pk of the fenced Complaint")
    parser.add_argument("--log", required=True, help="this client's log (JSON lines)")
    parser.add_argument("--ttl-ms", type=int, required=True)
    parser.add_argument("--hold-ms", type=int, nargs=2, required=True, metavar=("MIN", "MAX"))
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument(
        "--tx-hold-ms",
        type=int,
        nargs=2,
        default=(0, 0),
        metavar=("MIN", "MAX"),
        help="stay inside the transaction, after the fence UPDATE, this long (PG restarts)",
    )
    return parser.parse_args(argv)


def _tell(event: str, **fields) -> None:
    """One event for the nemesis on stdout, stamped with the shared monotonic clock."""
    fields.update(event=event, pid=os.getpid(), t=time.monotonic())
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _stop_when_stdin_closes() -> threading.Event:
    stop = threading.Event()

    def watch() -> None:
        for _ in sys.stdin:
            pass
        stop.set()

    threading.Thread(target=watch, name="stdin", daemon=True).start()
    return stop


def main(argv=None) -> None:
    options = _parse(argv if argv is not None else sys.argv[1:])
    import django

    django.setup()
    from datetime import timedelta

    from django.db import Error, close_old_connections, connection, transaction

    from hoa.models import Complaint

    # Only the public interface, and the counter-loss recovery as run_fenced does it:
    # the scenario keeps testing whatever locking becomes behind these names.
    from locking import (
        LockError,
        LockHeld,
        LockUnavailable,
        StaleFencingToken,
        advance_fence,
        run_fenced,
    )
    from locking.audit import Attempt

    rng = random.Random(options.seed)
    ttl = timedelta(milliseconds=options.ttl_ms)
    hold_ms = options.hold_ms
    attempt = Attempt(actor=f"nemesis-{options.client}", operation="nemesis")
    fenced_row = Complaint.objects.filter(pk=options.row)
    connection.ensure_connection()
    stop = _stop_when_stdin_closes()
    _tell("ready", client=options.client)

    with open(options.log, "a", encoding="utf-8") as log:
        op = 0
        while not stop.is_set():
            op += 1
            state: dict = {"token": None, "t_granted": None}
            # What a request does first: drop a connection that broke (a PostgreSQL
            # restart, a read timeout) so this operation opens a new one.
            close_old_connections()
            t_request = time.monotonic()
            wall_request = time.time()

            def work(lease, op=op, state=state, t_request=t_request) -> None:
                # Called once per grant: twice when the first grant's token was refused
                # because Redis had lost its counter. The last grant is the one that writes.
                state["t_granted"] = time.monotonic()
                state["token"] = lease.token
                _tell("granted", client=options.client, op=op, token=lease.token)
                time.sleep(rng.uniform(*hold_ms) / 1000)
                with transaction.atomic():
                    advance_fence(fenced_row, lease)
                    # Inside the transaction, the fence row locked: a PostgreSQL restart
                    # the nemesis times on this event lands mid-transaction.
                    _tell("fenced", client=options.client, op=op, token=lease.token)
                    if options.tx_hold_ms[1]:
                        time.sleep(rng.uniform(*options.tx_hold_ms) / 1000)
                    with connection.cursor() as cursor:
                        cursor.execute(
                            INSERT_HISTORY,
                            [
                                options.run,
                                options.client,
                                op,
                                lease.token,
                                t_request,
                                state["t_granted"],
                            ],
                        )
                _tell("committed", client=options.client, op=op, token=lease.token)

            detail = ""
            try:
                run_fenced(options.resource, work, ttl=ttl, attempt=attempt)
                outcome = "committed"
            except LockHeld:
                outcome = "busy"
            except StaleFencingToken as exc:
                outcome, detail = "stale", str(exc)
            except LockUnavailable as exc:
                outcome, detail = "unavailable", exc.reason
            except (LockError, Error) as exc:
                # The answer is unknown: the checker lets such a write be there or not.
                outcome, detail = "error", f"{exc.__class__.__name__}: {exc}"
            t_ack = time.monotonic()
            entry = {
                "client": options.client,
                "op": op,
                "pid": os.getpid(),
                "t_request": t_request,
                "t_granted": state["t_granted"],
                "token": state["token"],
                "outcome": outcome,
                "t_ack": t_ack,
                "wall_request": wall_request,
                "wall_ack": time.time(),
                "detail": detail[:300],
            }
            log.write(json.dumps(entry) + "\n")
            log.flush()
            _tell("done", client=options.client, op=op, outcome=outcome)
            if outcome == "committed":
                time.sleep(rng.uniform(0, 0.03))
            elif outcome == "busy":
                time.sleep(rng.uniform(0.01, 0.08))
            else:
                time.sleep(rng.uniform(0.03, 0.15))


if __name__ == "__main__":
    main()
