"""``python -m bench [--quick] [--only SECTIONS]``: run the benchmarks and report them.

Starts a private ``redis-server``, prepares the ``bench_hoa`` database, runs every group
of cases round-robin in fresh processes, prints one table per group and the targets of
issue 10 (PASS / MISS; FAIL for a broken invariant or a crashed case), writes
``bench/results/<name>.json`` and, for a full run, regenerates ``docs/bench.svg``.
Exits 1 on FAIL, 0 otherwise.
"""

import argparse
import importlib.util
import os
import sys
import time
from datetime import UTC, datetime

from bench import plan
from bench.environment import (
    BASE_DIR,
    BenchRedis,
    child_env,
    database_url,
    describe,
    machine,
    prepare_database,
)
from bench.report import (
    environment_summary,
    evaluate,
    group_table,
    invariant_failures,
    targets_table,
    write_json,
)
from bench.runner import run_group


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _reset_database() -> None:
    """Empty the bench database (never another one) and create the commit log table."""
    from django.core.management import call_command
    from django.db import connection

    from bench.fixtures import create_commit_log

    name = connection.settings_dict["NAME"]
    if not name.startswith("bench"):
        raise SystemExit(f"refusing to flush database {name!r}")
    call_command("flush", interactive=False, verbosity=0)
    create_commit_log()
    connection.close()


def _missing(section: str) -> str | None:
    """Why ``section`` cannot run yet (its service or endpoint is not built), or None."""
    if section == "writes":
        for module, function in (
            ("vendors.services", "assign_vendor"),
            ("charges.services", "generate_monthly_charges"),
        ):
            if importlib.util.find_spec(module) is None:
                return f"{module} does not exist yet"
            if not hasattr(importlib.import_module(module), function):
                return f"{module}.{function} does not exist yet"
    if section == "http":
        from django.urls import Resolver404, resolve

        try:
            resolve("/orgs/bench/complaints/1/assign/")
        except Resolver404:
            return (
                "the staff assign endpoint (POST /orgs/<slug>/complaints/<id>/assign/) is missing"
            )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (< 1 minute)")
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated sections to run (default: all): {', '.join(plan.SECTIONS)}",
    )
    parser.add_argument("--name", default="", help="results file name (default: full or quick)")
    parser.add_argument("--no-chart", action="store_true", help="do not rewrite docs/bench.svg")
    args = parser.parse_args(argv)

    profile = plan.QUICK if args.quick else plan.FULL
    name = args.name or profile.name
    sections = [s.strip() for s in args.only.split(",") if s.strip()] or list(plan.SECTIONS)
    unknown = set(sections) - set(plan.SECTIONS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")

    started = time.monotonic()
    started_at = datetime.now(tz=UTC).isoformat(timespec="seconds")
    database = database_url()
    redis_server = BenchRedis().start()
    try:
        env = child_env(database=database, redis_url=redis_server.url)
        os.environ.update(env)  # this process reads the same settings as its children
        log(f"bench: private Redis on port {redis_server.port}; preparing {database}")
        prepare_database(database, env)
        import django

        django.setup()
        _reset_database()
        environment = describe(database=database, redis_url=redis_server.url)
        log(environment_summary(environment))

        groups, skipped = [], {}
        for section in sections:
            reason = _missing(section)
            if reason:
                skipped[section] = reason
                log(f"bench: skipping section '{section}': {reason}")
                continue
            for group in plan.build(section, profile, redis_server.url):
                log(f"bench: {group.title} ({group.repeats} repeat(s) x {len(group.cases)} cases)")
                groups.append(run_group(group, env, log=log))
    finally:
        redis_server.stop()

    environment["machine_at_end"] = machine()
    evaluated = evaluate(plan.TARGETS, groups)
    failures = invariant_failures(groups)
    elapsed = round(time.monotonic() - started, 1)

    print()
    print(environment_summary(environment))
    for group in groups:
        print()
        print(group_table(group))
    print()
    print(targets_table(evaluated))
    print()
    if failures:
        print("Invariants: FAIL")
        for failure in failures:
            print(f"  FAIL {failure}")
    else:
        checks = sum(len(row["invariants"]) for g in groups for row in g["rows"])
        print(f"Invariants: all {checks} checks held (no overlap, tokens increasing, exactly once)")
    for section, reason in skipped.items():
        print(f"Skipped section '{section}': {reason}")

    results_path = BASE_DIR / "bench" / "results" / f"{name}.json"
    write_json(
        results_path,
        {
            "name": name,
            "profile": profile.name,
            "started_at": started_at,
            "seconds": elapsed,
            "environment": environment,
            "groups": groups,
            "targets": evaluated,
            "invariant_failures": failures,
            "skipped": skipped,
        },
    )
    print(f"\nWrote {results_path.relative_to(BASE_DIR)} ({elapsed:.0f} s)")
    if profile is plan.FULL and not args.no_chart and not args.only:
        from bench.chart import write_chart

        chart_path = BASE_DIR / "docs" / "bench.svg"
        caption = (
            f"make bench, {started_at[:10]}: {environment['machine']['cpus_usable']} CPUs "
            f"({environment['machine']['cpu']}), shared and noisy: compare ratios, not times."
        )
        if write_chart(chart_path, groups, caption=caption):
            print(f"Wrote {chart_path.relative_to(BASE_DIR)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
