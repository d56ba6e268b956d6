"""``python -m tests.faults``: run the fault-injection and load scenarios (``make faults``).

Starts a private PostgreSQL cluster, a private redis-server, two gunicorn instances of
two workers each, a stand-in for the billing and dispatch endpoints and two TCP proxies;
runs every scenario; prints a table; writes ``tests/faults/results/faults.json``; stops
every process it started. Exits 1 if any scenario saw an invariant violation or did not go
as expected, 2 if the harness itself could not start.

Options: ``--quick`` (a 20 s load instead of 60 s), ``--only KEY…`` (scenario keys,
numbers or prefixes: ``--only 1a 4 6f``), ``--load-seconds``, ``--clients``,
``--seed`` (of the randomized scenarios: the load's is 9, the nemesis draws a fresh one and
prints it; the second generation's seeds start there, ``--nemesis2-seeds`` of them, 10),
``--nemesis-rounds``, ``--history PATH`` (every request and answer, JSON
lines), ``--keep-logs``, ``--list``.
``python -m tests.faults.report`` prints the fault matrix of docs/reliability.md from the
last report.
"""

import argparse
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from tests.harness import HarnessError

RESULTS = Path(__file__).resolve().parent / "results" / "faults.json"


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a 20 s load instead of 60 s")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="scenario keys or numbers")
    parser.add_argument("--load-seconds", type=float, default=None)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--seed", type=int, help="seed of the load (default 9) and the nemesis (default: fresh)"
    )
    parser.add_argument("--nemesis-rounds", type=int, help="rounds of the nemesis (12)")
    parser.add_argument(
        "--nemesis2-seeds",
        type=int,
        help="seeds of the second-generation nemesis (10), from --seed on if given",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep gunicorn logs")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"default: {RESULTS}")
    parser.add_argument(
        "--history", type=Path, help="also write every request and answer here (JSON lines)"
    )
    return parser.parse_args(argv)


def _selected(registry, only):
    if not only:
        return list(registry)
    return [(spec, fn) for spec, fn in registry if any(_matches(spec, key) for key in only)]


def _matches(spec, key: str) -> bool:
    """``4`` matches scenario 4's cases, ``1a`` matches 1a-charges and 1a-assign."""
    return key in (spec.key, str(spec.group)) or spec.key.startswith(key + "-")


class _OverBudget(HarnessError):
    pass


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def _alarm(signum, frame):
    raise _OverBudget("the scenario ran past its time budget")


def main(argv=None) -> int:
    options = _parse(argv if argv is not None else sys.argv[1:])
    import tests.faults.scenarios  # noqa: F401  (registers them)
    from tests.faults.scenario import REGISTRY

    if options.list:
        for spec, _ in REGISTRY:
            print(f"{spec.key:22} {spec.title}")
        return 0
    chosen = _selected(REGISTRY, options.only)
    if not chosen:
        print("no scenario matches --only", file=sys.stderr)
        return 2
    os.environ["FAULTS_LOAD_SECONDS"] = str(
        options.load_seconds if options.load_seconds is not None else (20 if options.quick else 60)
    )
    os.environ["FAULTS_CLIENTS"] = str(options.clients)
    if options.seed is not None:
        os.environ["FAULTS_SEED"] = str(options.seed)
    if options.nemesis_rounds is not None:
        os.environ["FAULTS_NEMESIS_ROUNDS"] = str(options.nemesis_rounds)
    if options.nemesis2_seeds is not None:
        os.environ["FAULTS_NEMESIS2_SEEDS"] = str(options.nemesis2_seeds)

    from tests.faults.stack import Stack, StackOptions

    # A terminated run (make interrupted, CI timeout) still stops what it started.
    signal.signal(signal.SIGTERM, _terminated)
    secret = "faults-" + secrets.token_hex(24)
    stack = Stack(StackOptions(secret_key=secret, keep_logs=options.keep_logs))
    results = []
    started = time.monotonic()
    try:
        print("starting PostgreSQL, Redis, the stand-in and the proxies…", flush=True)
        stack.start_services()
        stack.migrate()
        world_json = stack.seed(users=max(24, options.clients + 8))
        _configure_django(stack, secret)
        from tests.faults.seed import World

        world = World.from_json(world_json)
        print(f"starting {stack.options.instances} gunicorn instances…", flush=True)
        stack.start_apps()
        from tests.faults.scenario import run_scenario, warm_up

        warm_up(stack, world)
        signal.signal(signal.SIGALRM, _alarm)
        for spec, function in chosen:
            print(f"  {spec.key:22} …", end="", flush=True)
            signal.alarm(_budget(spec))
            try:
                result = run_scenario(stack, world, spec, function)
            finally:
                signal.alarm(0)
            results.append(result)
            verdict = "skipped" if result.skipped else "ok" if result.ok else "FAILED"
            print(f" {verdict} ({result.seconds:.1f}s)", flush=True)
            if spec.show_observed and result.observed:
                print(f"    {result.observed}", flush=True)
    except HarnessError as exc:
        print(f"\nharness error: {exc}", file=sys.stderr)
        if options.keep_logs:
            print(f"logs: {stack.run_dir}", file=sys.stderr)
        return 2
    finally:
        # A scenario that failed keeps the servers' logs: a 5xx's traceback is only there.
        kept = options.keep_logs or any(not result.ok for result in results)
        stack.options.keep_logs = kept
        stack.stop()
    from tests.faults.report import print_table, write_history, write_json

    print_table(results)
    write_json(options.json, results, seconds=time.monotonic() - started, quick=options.quick)
    print(f"\nwrote {options.json}")
    if options.history:
        write_history(options.history, results)
        print(f"wrote {options.history}")
    if kept:
        print(f"logs kept in {stack.run_dir}")
    failed = [result for result in results if not result.ok]
    return 1 if failed else 0


def _budget(spec) -> int:
    load = float(os.environ.get("FAULTS_LOAD_SECONDS", "60"))
    if spec.group == 8:
        return int(load + 180)
    if spec.key == "10-nemesis2":
        # Each seed starts its own clients and plays its rounds: about a minute at most.
        seeds = int(os.environ.get("FAULTS_NEMESIS2_SEEDS") or 10)
        return 120 + 90 * seeds
    return 150 if spec.group < 10 else 300


def _configure_django(stack, secret: str) -> None:
    """Point this process's Django at the private database, then set it up."""
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "hoa.settings",
            "DATABASE_URL": stack.database_url,
            "REDIS_URL": stack.redis_server.url,
            "LOCK_REDIS_URL": stack.redis_server.url,
            "SECRET_KEY": secret,
            "DEBUG": "0",
            "LOG_LEVEL": "WARNING",
        }
    )
    import django

    django.setup()


if __name__ == "__main__":
    sys.exit(main())
