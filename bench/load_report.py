"""What ``make bench-load`` reports: per step and per page or action, requests/s, percentiles,
answers, the knee and the goals, as Locust measured them and as the server took them."""

from datetime import datetime
from functools import partial
from statistics import median

from bench import report
from bench.measure import percentile

# The fenced or serialized actions, each compared with its twin.
ACTIONS = (
    "action: change status", "action: assign a vendor", "action: reassign a vendor",
    "action: generate a month", "action: pay an invoice",
)  # fmt: skip
P99_FROM = 1000  # requests of one name before its p99 means anything
RATIO = 1.2  # a fenced action's p99 over its twin's


def stats(entries: list, seconds: float) -> dict:
    """``entries``: [ms, status] of one name (or all) in one step, measured for ``seconds``."""
    times, statuses = [ms for ms, _ in entries], [status for _, status in entries]

    def ms(figure, least: int = 1) -> float | None:
        return round(figure(times), 1) if len(times) >= max(least, 1) else None

    return {
        "requests": len(entries),
        "per_s": round(len(entries) / seconds, 2) if seconds > 0 else None,
        "p50_ms": ms(lambda t: percentile(t, 50)), "p95_ms": ms(lambda t: percentile(t, 95)),
        "p99_ms": ms(lambda t: percentile(t, 99), P99_FROM), "median_ms": ms(median),
        "max_ms": ms(max), "answered_409": statuses.count(409),
        "answered_4xx": sum(400 <= s < 500 and s != 409 for s in statuses),
        "errors_5xx": sum(s >= 500 for s in statuses), "no_answer": statuses.count(0),
        "all_p99_ms": ms(lambda t: percentile(t, 99)),  # for the knee
    }  # fmt: skip


# The access log line bench.load asks gunicorn for: when the request ended (to the second),
# its status, the server's time in microseconds, and the name Locust gave it.
ACCESS_LOG_FORMAT = "%(t)s|%(s)s|%(D)s|%({x-bench-name}i)s"
_STAMP = "[%d/%b/%Y:%H:%M:%S %z]"


def server_samples(lines, steps: list[dict], clock_offset: float) -> list[dict[str, list]]:
    """The access log's requests, per step and name as Locust's (``clock_offset``: wall - its)."""
    windows = [
        (times["measure_from"] + clock_offset, times["ended"] + clock_offset)
        if times and "ended" in times else None
        for times in steps
    ]  # fmt: skip
    found: list[dict[str, list]] = [{} for _ in steps]
    for line in lines:
        try:
            stamp, status, micros, name = line.rstrip("\n").split("|", 3)
            ended = datetime.strptime(stamp, _STAMP).timestamp()
            entry = [round(int(micros) / 1000, 2), int(status)]
        except ValueError:
            continue  # not a line of this format
        if name == "-":
            continue  # not Locust's (the health check that waited for the server)
        # The stamp is truncated to the second: a window starts at its second.
        index = next((n for n, w in enumerate(windows) if w and int(w[0]) <= ended < w[1]), None)
        if index is not None:
            found[index].setdefault(name, []).append(entry)
    return found


def _steps(run: dict, key: str = "samples") -> list[dict]:
    found = []
    for times, samples in zip(run["steps"], run.get(key) or [], strict=False):
        if not times or "ended" not in times:
            continue
        seconds = times["ended"] - times["measure_from"]
        everything = [entry for entries in samples.values() for entry in entries]
        by_name = {name: stats(entries, seconds) for name, entries in sorted(samples.items())}
        found.append({"users": times["users"], "seconds": round(seconds, 1),
                      "overall": stats(everything, seconds), "by_name": by_name})  # fmt: skip
    return found


def knee(steps: list[dict], *, bend: float, line_ms: float) -> dict:
    """The last step before p99 bent, the most staff within ``line_ms`` (of steps that counted)."""
    steps = [step for step in steps if step["overall"]["all_p99_ms"] is not None]
    first = steps[0]["overall"]["all_p99_ms"] if steps else None
    over = max(bend * first, line_ms) if first else None
    bent_at = next((s for s in steps[1:] if over and s["overall"]["all_p99_ms"] > over), None)
    before = [step for step in steps if bent_at is None or step["users"] < bent_at["users"]]
    within = [step["users"] for step in steps if step["overall"]["all_p99_ms"] <= line_ms]
    return {
        "knee_users": before[-1]["users"] if before and bent_at else None,
        "bent_at_users": bent_at["users"] if bent_at else None,
        "served_within_line_users": max(within) if within else None,
        "line_ms": line_ms,
        "over_the_line_from_the_first": bool(first and first > line_ms),  # the knee is below
    }


_target = partial(report.judged, "load")


def _against_twins(fenced: list, baseline: list, *, clock: str, report_only: bool) -> list:
    """Each action's p99 (under 1,000 requests, median) over its twin's, first step, ``clock``."""
    if not fenced or not baseline:
        return []
    found, mine, theirs = [], fenced[0]["by_name"], baseline[0]["by_name"]
    for action in ACTIONS:
        a, b, more = mine.get(action), theirs.get(action), {"report_only": report_only}
        if not a or not b:
            measured, what, more["detail"] = None, "p99", "no requests in a run"
        elif a["p99_ms"] is not None and b["p99_ms"] is not None:
            measured, what = round(a["p99_ms"] / b["p99_ms"], 3), "p99"
        else:
            measured = round(a["median_ms"] / b["median_ms"], 3)
            what = "median (under 1,000 requests)"
        text = f"{action}: {clock} {what} ≤ {RATIO}x its twin's"
        found.append(_target(text, measured, "<=", RATIO, **more))
    return found


def targets(analysed: dict, runs: dict) -> list[dict]:
    fenced, baseline, found = analysed.get("fenced") or {}, analysed.get("baseline") or {}, []
    for key, clock, only in (("server_steps", "server", False), ("steps", "Locust's", True)):
        found += _against_twins(fenced.get(key), baseline.get(key), clock=clock, report_only=only)
    errors = sum(
        step["overall"]["errors_5xx"] for run in analysed.values() for step in run["steps"]
    )
    found.append(_target("no 5xx in any step of any run", errors, "==", 0))
    if "fenced" in runs:
        checker = runs["fenced"].get("checker") or {}
        status = "PASS" if checker.get("exit_code") == 0 else "FAIL"
        last = (checker.get("output") or ["not run"])[-1]
        text = "the fault suite's invariants hold after the fenced run (tests.faults.check)"
        found.append(_target(text, last, "==", 0, status=status))
    return found


def analyse(runs: dict, *, pacing: float, line_ms: float, bend: float = 2.0) -> dict:
    analysed = {}
    for variant, run in runs.items():
        steps = _steps(run)
        wall, requests = run.get("wall_seconds") or 1, run.get("requests") or 1
        cpu = {
            "server_ms_per_request": round(1000 * run.get("server_cpu_seconds", 0) / requests, 2),
            "load_generator_share": round(run.get("load_generator_cpu_seconds", 0) / wall, 3),
        }
        server = _steps(run, "server_samples")
        analysed[variant] = {
            "steps": steps, "knee": knee(steps, bend=bend, line_ms=line_ms), "cpu": cpu,
            "server_steps": server, "server_knee": knee(server, bend=bend, line_ms=line_ms),
        }  # fmt: skip
    return {"analysis": analysed, "targets": targets(analysed, runs)}


# -- text ---------------------------------------------------------------------------------------
def _ms(value) -> str:
    return "-" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def steps_table(steps: list[dict]) -> str:
    headers = ["staff", "s", "req/s", "p50 ms", "p95 ms", "p99 ms", "409", "5xx", "no answer"]
    lines = [
        [f"{s['users']:,}", f"{s['seconds']:.0f}", f"{s['overall']['per_s']:.1f}",
         _ms(s["overall"]["p50_ms"]), _ms(s["overall"]["p95_ms"]),
         _ms(s["overall"]["all_p99_ms"]), str(s["overall"]["answered_409"]),
         str(s["overall"]["errors_5xx"]), str(s["overall"]["no_answer"])]
        for s in steps
    ]  # fmt: skip
    return report._table(headers, lines)


def names_table(analysed: dict, key: str = "steps") -> str:
    """The first step per page and action, variants side by side (Locust's or the server's)."""
    variants = [v for v in ("fenced", "baseline") if v in analysed and analysed[v].get(key)]
    names = sorted({n for v in variants for n in analysed[v][key][0]["by_name"]})
    headers = ["page or action"]
    for variant in variants:
        headers += [f"{variant} req/s", "n", "p50", "p95", "p99 (or max)", "409", "5xx"]
    lines = []
    for name in names:
        line = [name]
        for variant in variants:
            s = analysed[variant][key][0]["by_name"].get(name)
            if s is None:
                line += ["-"] * 7
                continue
            tail = _ms(s["p99_ms"]) if s["p99_ms"] is not None else f"max {_ms(s['max_ms'])}"
            line += [f"{s['per_s']:.2f}", str(s["requests"]), _ms(s["p50_ms"]), _ms(s["p95_ms"]),
                     tail, str(s["answered_409"]), str(s["errors_5xx"])]  # fmt: skip
        lines.append(line)
    return report._table(headers, lines)


def _knee_text(k: dict) -> str:
    if k["knee_users"]:
        return f"knee: {k['knee_users']:,} staff (p99 bent at {k['bent_at_users']:,})"
    if k["over_the_line_from_the_first"]:
        return "knee: below the first step (its p99 is over the line already)"
    return "knee: not reached in these steps"


def text(document: dict) -> str:
    parts = [report.environment_summary(document["environment"])]
    for variant, found in document["analysis"].items():
        k, cpu = found["knee"], found["cpu"]
        served = k["served_within_line_users"]
        within = f"{served:,} staff" if served else "none of the steps"
        title = f"Busiest hour, {variant} ({'real views' if variant == 'fenced' else 'twins'})"
        parts.append(
            f"{title}: steps (all requests), as Locust measured them\n"
            f"{steps_table(found['steps'])}\n{_knee_text(k)}; "
            f"within a p99 of {k['line_ms']:.0f} ms: {within}\n"
            f"gunicorn's CPU {cpu['server_ms_per_request']:.1f} ms per request; Locust used "
            f"{cpu['load_generator_share']:.0%} of one CPU"
        )
        if found.get("server_steps"):
            s = found["server_knee"]["served_within_line_users"]
            parts.append(
                f"{title}: the same steps as the server took them (gunicorn's access log)\n"
                f"{steps_table(found['server_steps'])}\n"
                f"within a p99 of {k['line_ms']:.0f} ms: {f'{s:,} staff' if s else 'none'}"
            )
    for key, clock in (("steps", "Locust measured"), ("server_steps", "the server took")):
        if any(found.get(key) for found in document["analysis"].values()):
            table = names_table(document["analysis"], key)
            parts.append(f"First step, per page and action, as {clock} it (p99 from 1,000 "
                         f"requests on, else the maximum)\n{table}")  # fmt: skip
    return "\n\n".join([*parts, report.targets_table(document["targets"])])
