"""``python -m bench [--quick] [--only SECTIONS]``: a table per group with its targets (PASS,
MISS; FAIL exits 1), ``bench/results/<name>.json`` and, for a full run, ``docs/bench.svg``."""

import argparse
import sys
import time
from datetime import UTC, datetime

from bench import environment, plan, report
from bench.environment import BASE_DIR, log
from bench.runner import run_group


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (about 2 minutes)")
    sections = ", ".join(plan.SECTIONS)
    parser.add_argument("--only", default="", help=f"sections to run (default: all): {sections}")
    parser.add_argument("--name", default="", help="results file name (default: full or quick)")
    parser.add_argument("--no-chart", action="store_true", help="do not rewrite docs/bench.svg")
    parser.add_argument(
        "--max-repeats", type=int, default=0,
        help="run each group at most this many times (a busy machine, a deadline); recorded",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.sections = [s.strip() for s in args.only.split(",") if s.strip()] or list(plan.SECTIONS)
    if unknown := set(args.sections) - set(plan.SECTIONS):
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    profile = plan.QUICK if args.quick else plan.FULL
    name = args.name or profile.name
    started, started_at = time.monotonic(), datetime.now(tz=UTC).isoformat(timespec="seconds")
    database, groups = environment.database_url(), []
    with environment.private_redis(database) as (env, redis_server):
        log(f"bench: private Redis on port {redis_server.port}; preparing {database}")
        environment.prepare_database(database)
        facts = environment.describe(database=database, redis_url=redis_server.url)
        log(report.environment_summary(facts))
        for group in [g for s in args.sections for g in plan.build(s, profile, redis_server.url)]:
            if args.max_repeats:
                group.repeats = min(group.repeats, args.max_repeats)
            log(f"bench: {group.title} ({group.repeats} repeat(s) x {len(group.cases)} cases)")
            groups.append(run_group(group, env, log=log))
    facts["machine_at_end"] = environment.machine()
    failures, elapsed = report.invariant_failures(groups), round(time.monotonic() - started, 1)
    results_path = BASE_DIR / "bench" / "results" / f"{name}.json"
    document = {
        "name": name, "profile": profile.name, "started_at": started_at, "seconds": elapsed,
        "max_repeats": args.max_repeats or None, "sections": args.sections,
        "environment": facts, "groups": groups,
        "targets": report.evaluate(plan.targets(profile), groups), "invariant_failures": failures,
    }  # fmt: skip
    print(f"\n{report.text(document)}")
    report.write_json(results_path, document)
    print(f"\nWrote {results_path.relative_to(BASE_DIR)} ({elapsed:.0f} s)")
    if profile is plan.FULL and not args.no_chart and not args.only:
        chart_path = BASE_DIR / "docs" / "bench.svg"
        cpus = f"{facts['machine']['cpus_usable']} CPUs ({facts['machine']['cpu']}), shared"
        caption = f"make bench, {started_at[:10]}: {cpus} and noisy: compare ratios, not times."
        if report.write_chart(chart_path, groups, caption=caption):
            print(f"Wrote {chart_path.relative_to(BASE_DIR)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
