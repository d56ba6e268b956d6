"""``python -m tests.faults.check HISTORY [--received CALLS]``: the fault suite's history
checker (``tests.faults.checker``) as a command, for a history recorded by another harness
(``make bench-load``'s busiest hour, which imports nothing of the tests).

``HISTORY``: JSON lines, one request each: the ``Op`` fields (``kind`` "charges" or
"assign", ``org``, ``org_id``, ``client``, ``user``, ``via``, ``month``, ``complaint``,
``vendor``, ``reassign``, ``started``, ``ended``: wall clock) and what its client was shown:
``status`` (HTTP; 0 when no answer came), ``title`` (the page's ``<h1>``, for an answer
other than a 303) and ``message_tags`` (the classes of the message the page after a 303
showed; absent when it was not read). Each gets its verdict as the suite's own clients
give it (``tests.faults.clients``). ``CALLS``: JSON lines of the calls the external stand-in
received: ``path``, ``key`` (``Idempotency-Key``), ``token``, ``status`` and the receiver's
``verdict``.

The checker reads the database the settings name (``DATABASE_URL``): the one the history
was written to. Prints the verdicts counted and every violation; exits 1 when there is one
(or a file is unreadable), 0 otherwise.
"""

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _ops(records: list[dict]) -> list:
    from tests.faults.clients import Op, verdict_of_answer, verdict_of_message

    names = {field.name for field in fields(Op)}
    ops = []
    for record in records:
        op = Op(**{name: value for name, value in record.items() if name in names})
        if op.status == 303:
            op.verdict = verdict_of_message(record.get("message_tags"))
        else:
            op.verdict = verdict_of_answer(op.status or 0, record.get("title", ""))
        op.detail = record.get("message") or record.get("title") or ""
        ops.append(op)
    return ops


def _received(records: list[dict]) -> list:
    from tests.harness.http import Received

    return [
        Received(
            path=call["path"],
            body=b"",
            status=int(call["status"]),
            verdict=call["verdict"],
            headers={"Idempotency-Key": call["key"], "X-Fencing-Token": str(call["token"])},
        )
        for call in records
        if call.get("key") and str(call.get("token", "")).lstrip("-").isdigit()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.check", description=__doc__)
    parser.add_argument("history", type=Path)
    parser.add_argument("--received", type=Path, help="the stand-in's calls (JSON lines)")
    args = parser.parse_args(argv)
    try:
        records = _lines(args.history)
        calls = _lines(args.received) if args.received else []
    except (OSError, ValueError) as exc:
        print(f"cannot read the history: {exc}", file=sys.stderr)
        return 1
    import django

    django.setup()
    from django.db.models import Count

    from hoa.models import Organization
    from tests.faults.checker import check_history, summarize

    ops = _ops(records)
    org_ids = {op.org_id for op in ops}
    units = dict(
        Organization.objects.filter(pk__in=org_ids)
        .annotate(count=Count("units"))
        .values_list("pk", "count")
    )
    violations = check_history(ops, received=_received(calls), units=units)
    counts = ", ".join(f"{count} {verdict}" for verdict, count in summarize(ops).items())
    print(f"{len(ops)} operations ({counts or 'none'}), {len(calls)} external calls")
    for line in violations:
        print(f"VIOLATION {line}")
    print(f"{len(violations)} invariant violations")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
