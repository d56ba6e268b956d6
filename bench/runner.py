"""Cases run round-robin, each in a fresh process (the block at the end), and summarised with
ratios paired per repeat (docs/benchmarks.md, "How it is measured")."""

import importlib
import json
import math
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from statistics import median as _median

from bench.environment import BASE_DIR
from bench.measure import median, percentile

RESULT_PREFIX = "BENCH-RESULT "


@dataclass(frozen=True)
class Case:
    """``entry`` ("module:function") run in a fresh process with ``params``: a ``result()``."""

    id: str
    label: str
    entry: str
    params: dict = field(default_factory=dict)
    django: bool = True
    timeout: float = 180


@dataclass
class Group:
    """Cases compared with each other; ratios are of the ``primary`` metric or median latency."""

    id: str
    title: str
    cases: list[Case]
    repeats: int
    baseline: str | None = None
    primary: str = "latency"
    higher_is_better: bool = False
    note: str = ""
    latency_label: str = "cycle"  # the median/p99 columns' name ("" hides them)
    columns: list[tuple[str, str]] = field(default_factory=list)


class CaseFailed(Exception):
    """A case's process crashed, timed out or printed no result; the group goes on."""


def run_case(case: Case, env: dict) -> dict:
    request = json.dumps({"entry": case.entry, "django": case.django, "params": case.params})
    worker = [sys.executable, "-m", "bench.runner"]
    try:
        proc = subprocess.run(worker, input=request, cwd=BASE_DIR, env=env, capture_output=True,
                              text=True, timeout=case.timeout)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise CaseFailed(f"timed out after {case.timeout:.0f}s") from exc
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
    raise CaseFailed(f"exit {proc.returncode}: " + "\n".join(tail))


def run_group(group: Group, env: dict, *, log=print) -> dict:
    """Run ``group`` round-robin for its repeats; return the summary the report prints."""
    runs: dict[str, list[dict]] = {case.id: [] for case in group.cases}
    errors: dict[str, str] = {}
    started = time.monotonic()
    for repeat in range(group.repeats):
        shift = repeat % len(group.cases)
        for case in group.cases[shift:] + group.cases[:shift]:
            if case.id in errors:
                continue
            try:
                runs[case.id].append(run_case(case, env))
            except CaseFailed as exc:
                errors[case.id] = str(exc)
                log(f"  ! {case.id} failed: {exc}")
        log(f"  {group.id}: repeat {repeat + 1}/{group.repeats} done")
    shown = "id title note baseline primary higher_is_better repeats latency_label columns"
    summary = {key: getattr(group, key) for key in shown.split()}
    summary["seconds"] = round(time.monotonic() - started, 1)
    base_runs = runs.get(group.baseline, [])
    summary["rows"] = [
        _summarise(case, runs[case.id], base_runs, group, errors.get(case.id))
        for case in group.cases
    ]
    return summary


def _value(run: dict, group: Group) -> float:  # what ratios are taken of
    if group.primary == "latency":
        return median(run.get("samples_us", []))
    return float(run.get("metrics", {}).get(group.primary, math.nan))


def _invariants(mine: list[dict]) -> list[dict]:
    """Each invariant once: failed if any run broke it, with the first detail that says why."""
    merged: dict[str, dict] = {}
    for check in (check for run in mine for check in run.get("invariants", [])):
        entry = merged.setdefault(check["name"], {"name": check["name"], "ok": True, "detail": ""})
        if not check["ok"]:
            entry.update(ok=False, detail=check.get("detail", ""))
        elif not entry["detail"]:
            entry["detail"] = check.get("detail", "")
    return list(merged.values())


def _summarise(case: Case, mine: list, base_runs: list, group: Group, error: str | None) -> dict:
    samples = [s for run in mine for s in run.get("samples_us", [])]
    names = sorted({name for run in mine for name in run.get("metrics", {})})
    metrics_per_repeat = {
        name: [run["metrics"][name] for run in mine if name in run.get("metrics", {})]
        for name in names
    }
    metrics = {
        name: _median(values) if all(isinstance(v, int | float) for v in values) else values[0]
        for name, values in metrics_per_repeat.items()
    }
    counts = mine[0].get("counts", {}) if mine else {}
    ratio = None
    if group.baseline and case.id != group.baseline:
        pairs = zip(mine, base_runs, strict=False)
        values = [(_value(run, group), _value(base, group)) for run, base in pairs]
        paired = [value / base for value, base in values if base and not math.isnan(value / base)]
        ratio = round(_median(paired), 3) if paired else None
    return {
        "case": case.id, "label": case.label, "error": error, "runs": len(mine),
        "samples": len(samples), "median_us": _round(median(samples)),
        "p99_us": _round(percentile(samples, 99)),
        "per_repeat_median_us": [_round(median(run.get("samples_us", []))) for run in mine],
        "per_repeat_value": [_round(_value(run, group), None) for run in mine],
        "metrics": metrics, "metrics_per_repeat": metrics_per_repeat, "counts": counts,
        "counts_consistent": all(run.get("counts", {}) == counts for run in mine),
        "ratio": ratio, "invariants": _invariants(mine),
    }  # fmt: skip


def _round(value: float | None, digits: int | None = 1) -> float | None:
    if value is None or math.isnan(value):
        return None
    return value if digits is None else round(value, digits)


if __name__ == "__main__":  # one case, in the fresh process run_case starts
    request = json.loads(sys.stdin.read())
    # pottery warns about its own internals on import; not our concern in a benchmark.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    if request["django"]:
        import django

        django.setup()
    module, _, function = request["entry"].partition(":")
    result = getattr(importlib.import_module(module), function)(**request["params"])
    print(RESULT_PREFIX + json.dumps(result), flush=True)
