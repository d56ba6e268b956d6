"""``python -m bench.scale``: the month start at 1,000, 10,000 and 100,000 associations
(``make bench-scale``), in a database of its own, after an estimate of time and disk; exits 1
on FAIL or too small a disk (docs/benchmarks.md, "The month start at 1,000, …")."""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench import environment, plan, report, scale_report
from bench.environment import BASE_DIR, log
from bench.measure import Poller
from bench.runner import run_group

RESULTS = BASE_DIR / "bench" / "results"
DATABASE = "bench_scale"
_DATABASE = sql.Identifier(DATABASE)
SMALLEST = 50  # one chunk of the walk: the diagnosis explains one


def _scales(text: str) -> list[int]:
    try:
        scales = sorted({int(part.replace("_", "")) for part in text.replace(",", " ").split()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from exc
    if not scales or scales[0] < SMALLEST:
        raise argparse.ArgumentTypeError(f"scales of at least {SMALLEST} associations each")
    return scales


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser("python -m bench.scale", description=__doc__.split("\n")[0])
    default = os.environ.get("BENCH_SCALES") or " ".join(map(str, plan.SCALES))
    shown = default.replace(" ", ",")
    parser.add_argument("--scales", type=_scales, default=default,
                        help=f"associations per scale (default: {shown})")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=plan.SCALE_REPEATS, help="paired runs")
    parser.add_argument("--name", default="", help="results name (default: scale, or scale-check)")
    parser.add_argument("--estimate", action="store_true", help="print the estimate and stop")
    parser.add_argument("--keep-database", action="store_true", help="do not drop bench_scale")
    args = parser.parse_args(argv)
    # Only the full run (every scale, every repeat) writes the docs' table and chart.
    args.full = tuple(args.scales) == plan.SCALES and args.repeats == plan.SCALE_REPEATS
    args.name = args.name or ("scale" if args.full else "scale-check")
    return args


def database_url() -> str:
    parts = urlsplit(environment.database_url())
    return urlunsplit(parts._replace(path=f"/{DATABASE}"))


def _superuser(url: str, database: str = "postgres") -> psycopg.Connection:
    """A connection as ``postgres`` to the project-local server (trust on loopback)."""
    return environment.connect(url, database, user="postgres", autocommit=True)


# -- how long, how much disk ------------------------------------------------------------------
def cost_model() -> tuple[dict, str]:
    """Seconds and bytes per case, fitted on the last full or check run if there is one."""
    for name in ("scale", "scale-check"):
        path = RESULTS / f"{name}.json"
        earlier = json.loads(path.read_text()) if path.exists() else {}
        if earlier.get("cost_model"):
            return earlier["cost_model"], f"from the run of {earlier['started_at']}"
    return dict(plan.SCALE_COST), "from the figures in bench/plan.py, SCALE_COST"


def estimate(scales: list[int], repeats: int, model: dict) -> dict:
    cases, per_association = len(plan.SCALE_CASES) * repeats, model["seconds_per_association"]
    seconds = cases * (model["seconds_per_case"] * len(scales) + per_association * sum(scales))
    peak = model["bytes_fixed"] + model["bytes_per_association"] * max(scales)
    return {"seconds": round(seconds), "peak_bytes": round(peak)}


def _line(points: list[tuple[int, float]], fixed: float) -> tuple[float, float]:
    """Intercept and slope of the least-squares line through ``points`` (one: from ``fixed``)."""
    if len(points) == 1:
        (n, value), intercept = points[0], fixed
        return intercept, max(value - intercept, 0) / n
    slope, intercept = statistics.linear_regression(*zip(*points, strict=True))
    return max(intercept, 0), max(slope, 0)


def fit(groups: list[dict]) -> dict | None:
    """This run's cost model, for the next run's estimate: lines through seconds and peak disk."""
    if not groups:
        return None
    seconds = [(g["associations"], g["seconds"] / (len(g["rows"]) * g["repeats"])) for g in groups]
    disk = [(g["associations"], g["peak_disk_bytes"]) for g in groups if g["peak_disk_bytes"]]
    model = dict(plan.SCALE_COST)
    fixed, per_association = _line(seconds, model["seconds_per_case"])
    model.update(
        seconds_per_case=round(fixed, 1), seconds_per_association=round(per_association, 5)
    )
    if disk:
        fixed, per_association = _line(disk, model["bytes_fixed"])
        model.update(bytes_fixed=round(fixed), bytes_per_association=round(per_association))
    return model


def _show(url: str, setting: str) -> str:  # "" if the server could not be asked
    with contextlib.suppress(psycopg.Error), _superuser(url) as conn:
        return conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting))).fetchone()[0]
    return ""


def free_bytes(url: str) -> int | None:
    """Free space where the server keeps its data, if this process can see that folder."""
    with contextlib.suppress(OSError):
        return shutil.disk_usage(_show(url, "data_directory")).free
    return None


class DiskSampler(Poller):
    """The database's size plus PostgreSQL's WAL, every 2 s; the peak per ``label``."""

    every = 2.0
    SQL = "SELECT pg_database_size(%s) + (SELECT coalesce(sum(size), 0) FROM pg_ls_waldir())"

    def __init__(self, url: str):
        super().__init__()
        self.url, self.label, self.peaks, self._conn = url, None, {}, None

    def sample(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._conn = self._conn or _superuser(self.url)
            [used] = self._conn.execute(self.SQL, [DATABASE]).fetchone()
            if self.label is not None:
                self.peaks[self.label] = max(self.peaks.get(self.label, 0), int(used))

    def stop(self, *exc) -> None:
        super().stop()
        if self._conn is not None:
            self._conn.close()


# -- the run ----------------------------------------------------------------------------------
def prepare(url: str) -> None:
    """A fresh ``bench_scale``, migrated, pg_stat_statements tracking every statement in it."""
    drop(url)
    environment.prepare_database(url)
    role = sql.Identifier(urlsplit(url).username or "hoa")
    with _superuser(url, DATABASE) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        except psycopg.Error as exc:
            log(f"bench-scale: no pg_stat_statements ({exc}); statements will not be recorded")
            return
        reset = "GRANT EXECUTE ON FUNCTION pg_stat_statements_reset(oid, oid, bigint) TO {}"
        conn.execute(sql.SQL(reset).format(role))
        track = "ALTER DATABASE {} SET pg_stat_statements.track = 'all'"
        conn.execute(sql.SQL(track).format(_DATABASE))


def drop(url: str) -> None:
    with _superuser(url) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(_DATABASE))


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    url = database_url()
    model, source = cost_model()
    expected = estimate(args.scales, args.repeats, model)
    free = free_bytes(url)
    log(scale_report.estimate_text(args.scales, args.repeats, expected, source, free))
    if free is not None and expected["peak_bytes"] > 0.9 * free:
        log("bench-scale: not enough free disk for this run; free some or run fewer scales")
        return 1
    if args.estimate:
        return 0
    if "pg_stat_statements" not in _show(url, "shared_preload_libraries").replace(" ", ""):
        log("bench-scale: pg_stat_statements is not loaded (scripts/services.sh "
            "enable-pg-stat-statements): the run goes on without the statements")  # fmt: skip
    started, started_at = time.monotonic(), datetime.now(tz=UTC).isoformat(timespec="seconds")
    sampler, groups = DiskSampler(url), []
    try:
        with environment.private_redis(url) as (env, redis_server):
            log(f"bench-scale: private Redis on port {redis_server.port}; preparing {DATABASE}")
            prepare(url)
            facts = environment.describe(database=url, redis_url=redis_server.url)
            log(report.environment_summary(facts))
            sampler.start()
            for associations in args.scales:
                group, sampler.label = plan.scale_group(associations, args.repeats), associations
                log(f"bench-scale: {group.title} ({group.repeats} paired runs)")
                summary = run_group(group, env, log=log)
                peak = sampler.peaks.get(associations)
                groups.append({**summary, "associations": associations, "peak_disk_bytes": peak})
    finally:
        sampler.stop()
        if not args.keep_database:
            with contextlib.suppress(psycopg.Error):
                drop(url)
    facts["machine_at_end"] = environment.machine()
    elapsed = round(time.monotonic() - started, 1)
    document = scale_report.analyse(groups, plan.SCALE_GOALS)
    document.update(
        name=args.name, started_at=started_at, seconds=elapsed, scales=args.scales,
        repeats=args.repeats, environment=facts, groups=groups,
        estimate={**expected, "from": source}, cost_model=fit(groups),
        invariant_failures=report.invariant_failures(groups),
    )  # fmt: skip
    print(f"\n{scale_report.text(document)}")
    docs = BASE_DIR / "docs" if args.full else None
    for path in scale_report.write(document, RESULTS, docs=docs):
        print(f"Wrote {path.relative_to(BASE_DIR)}")
    print(f"({elapsed:.0f} s; estimated {expected['seconds']:.0f} s)")
    return 1 if document["invariant_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
