"""``python -m bench.load``: an office at its busiest hour (``make bench-load``), the real
views or their twins under Locust's staff, stepped up until p99 bends; the fault suite's checker
after the fenced run (docs/benchmarks.md, "An office at its busiest hour")."""

import argparse
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import redis

from bench import environment, load_report, report
from bench.environment import BASE_DIR, cpu_seconds, free_port, log, start_gunicorn, stop

RESULTS = BASE_DIR / "bench" / "results"
UNITS = 200  # per association, as the month start's
FIRST_MONTH = 1200  # months from 2101-01 on (fixtures.month numbering): none generated yet

# fmt: off
PROFILES = {  #             full    quick
    "users":               (250,    250),
    "associations":        (50,     25),
    "complaints":          (300,    100),  # open ones per association at the start
    "vendors":             (4,      4),
    "invoices":            (200,    40),   # approved ones per association, to pay
    "base_seconds":        (3600,   120),  # the first step: the busiest hour itself
    "step_seconds":        (180,    60),   # each step above it, looking for the knee
    "multiples":           ((2, 3, 4, 6, 8, 12), (1.2, 1.4)),
}
# fmt: on
PACING = 15.0  # seconds per task per user: 4 pages and 2 changes a minute
BEND = 2.0  # a step's p99 over this times the first step's (and over the line): bent
P99_LINE_MS = 300.0  # the line docs/capacity.md keeps: staff served within a p99 of 300 ms
SPAWN_RATE = 5  # users started per second: faster slows their later requests (docs)


def _multiples(text: str) -> tuple[float, ...]:
    try:
        found = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from exc
    if not found or min(found) <= 0:
        raise argparse.ArgumentTypeError("multiples above 0, comma-separated")
    return found


def _arguments(argv):
    parser = argparse.ArgumentParser("python -m bench.load", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 min at 250 staff, two 1 min steps")
    parser.add_argument("--variants", default="fenced,baseline", help="fenced, baseline or both")
    parser.add_argument("--name", default="", help="results name (busiest-hour[-quick])")
    parser.add_argument("--users", type=int, help="staff at the first step")
    parser.add_argument("--base-seconds", type=float, help="the first step's length")
    parser.add_argument("--step-seconds", type=float, help="each further step's length")
    parser.add_argument("--multiples", type=_multiples, help="more steps, x --users: 2,4,8")
    args = parser.parse_args(argv)
    args.profile = {key: values[1 if args.quick else 0] for key, values in PROFILES.items()}
    for key in ("users", "base_seconds", "step_seconds", "multiples"):
        if getattr(args, key):
            args.profile[key] = getattr(args, key)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if unknown := set(args.variants) - {"fenced", "baseline"}:
        parser.error(f"unknown variant(s): {', '.join(sorted(unknown))}")
    args.name = args.name or ("busiest-hour-quick" if args.quick else "busiest-hour")
    return args


def steps(profile: dict) -> list[tuple[int, float]]:
    users = profile["users"]
    return [(users, profile["base_seconds"])] + [
        (round(users * multiple), profile["step_seconds"]) for multiple in profile["multiples"]
    ]


# -- the office ---------------------------------------------------------------------------------
def build_world(profile: dict, users: int) -> dict:
    """The office: associations, vendors, complaints, invoices, ``users`` staff logged in."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from bench import fixtures
    from hoa.demo import staff_group
    from hoa.models import StaffMembership, Unit

    associations = []
    for number in range(profile["associations"]):
        org = fixtures.organization(f"load-{number:03d}", units=UNITS)
        vendors = fixtures.vendors_with_contracts(org, profile["vendors"])
        complaints = fixtures.complaints(org, profile["complaints"], title="Busiest hour")
        bills = fixtures.approved_invoices(
            org, profile["invoices"], vendor=vendors[0], label=org.slug
        )
        units = list(Unit.objects.filter(organization=org).values_list("pk", flat=True))
        associations.append(
            {"slug": org.slug, "id": org.pk, "units": units, "vendors": [v.pk for v in vendors],
             "complaints": [c.pk for c in complaints], "invoices": [i.pk for i in bills]}
        )  # fmt: skip
    model = get_user_model()
    password = fixtures.password_hash()
    staff = model.objects.bulk_create(
        model(username=f"load-staff-{n:05d}", is_staff=True, password=password)
        for n in range(users)
    )
    through, group = model.groups.through, staff_group()
    through.objects.bulk_create(through(user_id=user.pk, group_id=group.pk) for user in staff)
    count = len(associations)
    StaffMembership.objects.bulk_create(
        StaffMembership(user=user, organization_id=associations[n % count]["id"])
        for n, user in enumerate(staff)
    )
    logins = [
        {"username": user.username, "association": n % count,
         "session": fixtures.session_key(user), "csrf": secrets.token_hex(16)}
        for n, user in enumerate(staff)
    ]  # fmt: skip
    return {"associations": associations, "users": logins,
            "session_cookie": settings.SESSION_COOKIE_NAME,
            "csrf_cookie": settings.CSRF_COOKIE_NAME}  # fmt: skip


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_variant(variant: str, profile: dict, plan: list, env: dict, out: Path) -> dict:
    port, run_dir = free_port(), Path(tempfile.mkdtemp(prefix="hoa-bench-load-"))
    files = _office(variant, profile, plan, env, port, run_dir, out)
    secret = secrets.token_hex(16)
    receiver, receiver_url = environment.start_receiver(secret)
    gunicorn = None
    try:
        gunicorn = start_gunicorn(
            port, str(run_dir), secret_key=env["SECRET_KEY"],
            WEB_CONCURRENCY=os.environ.get("WEB_CONCURRENCY", "2"),
            BILLING_WEBHOOK_URL=f"{receiver_url}/billing",
            VENDOR_DISPATCH_URL=f"{receiver_url}/dispatch", WEBHOOK_SIGNING_SECRET=secret,
            VENDOR_PAYMENT_URL=f"{receiver_url}/payment",
            CONN_MAX_AGE="60", args=("--access-logformat", load_report.ACCESS_LOG_FORMAT),
        )  # fmt: skip
        measured = _locust(variant, files, plan, gunicorn.pid)
    finally:
        stop(gunicorn, grace=40)
        receiver.shutdown()
    with (run_dir / f"{port}.access.log").open(encoding="utf-8", errors="replace") as lines:
        measured["server_samples"] = load_report.server_samples(
            lines, measured["steps"], measured["clock_offset"]
        )  # the log gunicorn.conf.py names
    reports = sorted(RESULTS.glob(f"{files['csv'].name}*"))
    measured.update(variant=variant, calls=list(receiver.calls),
                    locust_files=[str(path.relative_to(BASE_DIR)) for path in reports])  # fmt: skip
    if variant == "fenced":
        measured["checker"] = run_checker(measured, env, run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    return measured


def _office(variant, profile, plan, env, port: int, run_dir: Path, out: Path) -> dict:
    """A fresh database and Redis with the office; the world file for Locust and its files."""
    import django
    from django.db import connections

    django.setup()
    redis.Redis.from_url(env["REDIS_URL"]).flushall()  # the private one: a fresh office
    environment.prepare_database(env["DATABASE_URL"])
    log(f"bench-load: {variant}: building the office")
    world = build_world(profile, max(users for users, _ in plan))
    with connections["default"].cursor() as cursor:  # each variant on its office's statistics
        cursor.execute("ANALYZE")
    connections.close_all()
    reports = out.with_name(f"{out.name}-{variant}")  # Locust's: <name>-<variant>_stats.csv …
    files = {
        "world": run_dir / "world.json", "output": run_dir / "output.json",
        "csv": reports, "html": reports.with_name(f"{reports.name}.html"),
    }  # fmt: skip
    world.update(
        base_url=f"http://127.0.0.1:{port}", first_month=FIRST_MONTH, output=str(files["output"]),
        prefix="bench/unfenced/" if variant == "baseline" else "",
        plan={"steps": plan, "pacing": PACING, "bend": BEND, "p99_line_ms": P99_LINE_MS,
              "spawn_rate": SPAWN_RATE},
    )  # fmt: skip
    files["world"].write_text(json.dumps(world))
    return files


def _locust(variant: str, files: dict, plan: list, server_pid: int) -> dict:
    """Locust's run of the steps, headless; what it recorded, with the CPU both spent."""
    base_url = json.loads(files["world"].read_text())["base_url"]
    command = [
        sys.executable, "-m", "locust", "-f", str(BASE_DIR / "bench" / "locustfile.py"),
        "--headless", "--host", base_url, "--csv", str(files["csv"]),
        "--html", str(files["html"]), "--only-summary", "--loglevel", "WARNING",
    ]  # fmt: skip
    seconds = sum(length for _, length in plan)
    log(f"bench-load: {variant}: Locust, {len(plan)} step(s), up to {seconds / 60:.0f} min")
    server_cpu, children_cpu, started = cpu_seconds(server_pid), _children_cpu(), time.monotonic()
    locust = subprocess.Popen(
        command, cwd=BASE_DIR, env={**os.environ, "BENCH_LOAD_WORLD": str(files["world"])},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, errors = locust.communicate(timeout=seconds + 300)
    except subprocess.TimeoutExpired:
        raise RuntimeError("Locust ran past its steps' time") from None
    finally:
        stop(locust)
    spent = {
        "wall_seconds": round(time.monotonic() - started, 1),
        "server_cpu_seconds": round(cpu_seconds(server_pid) - server_cpu, 1),
        "load_generator_cpu_seconds": round(_children_cpu() - children_cpu, 1),  # Locust's own
    }
    if not files["output"].exists():
        raise RuntimeError(f"Locust wrote no results (exit {locust.returncode}): {errors[-2000:]}")
    measured = json.loads(files["output"].read_text())
    measured.update(spent)
    return measured


def run_checker(measured: dict, env: dict, folder: Path) -> dict:
    """The fault suite's checker over the run's assignments and generations, as a command."""
    history, calls = folder / "history.jsonl", folder / "calls.jsonl"
    history.write_text("".join(json.dumps(op) + "\n" for op in measured["history"]))
    calls.write_text("".join(json.dumps(call) + "\n" for call in measured["calls"]))
    command = [sys.executable, "-m", "tests.faults.check", str(history), "--received", str(calls)]
    done = subprocess.run(command, cwd=BASE_DIR, env=env, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    lines = (done.stdout + done.stderr).strip().splitlines()
    log(f"bench-load: checker: {(lines or ['(no output)'])[0]}; {(lines or [''])[-1]}")
    return {"exit_code": done.returncode, "output": lines[-200:]}


def main(argv=None) -> int:
    args = _arguments(argv)
    plan = steps(args.profile)
    started, started_at = time.monotonic(), datetime.now(tz=UTC).isoformat(timespec="seconds")
    total = sum(seconds for _, seconds in plan) * len(args.variants)
    log(f"bench-load: {', '.join(args.variants)}; steps {plan}; up to {total / 60:.0f} min of load")
    database, runs = environment.database_url(), {}
    try:
        with environment.private_redis(database) as (env, redis_server):
            facts = environment.describe(database=database, redis_url=redis_server.url)
            for variant in args.variants:
                runs[variant] = run_variant(variant, args.profile, plan, env, RESULTS / args.name)
    except RuntimeError as exc:  # gunicorn or Locust did not start or did not finish
        log(f"bench-load: {exc}")
        return 1
    facts["machine_at_end"] = environment.machine()
    document = load_report.analyse(runs, pacing=PACING, line_ms=P99_LINE_MS, bend=BEND)
    document.update(
        name=args.name, started_at=started_at, seconds=round(time.monotonic() - started, 1),
        profile={**args.profile, "pacing": PACING, "bend": BEND, "steps": plan},
        environment=facts,
    )  # fmt: skip
    print(f"\n{load_report.text(document)}")
    # The raw samples stay in Locust's files, not in the JSON.
    document["runs"] = {variant: {key: value for key, value in run.items()
                                  if key not in ("samples", "server_samples")}
                        for variant, run in runs.items()}  # fmt: skip
    path = RESULTS / f"{args.name}.json"
    report.write_json(path, document)
    print(f"\nWrote {path.relative_to(BASE_DIR)} and Locust's reports beside it")
    failed = any(t["status"] == "FAIL" for t in document["targets"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
