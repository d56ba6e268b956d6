"""The suite's report: a table on stdout and a JSON file under tests/faults/results/."""

import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

from tests.harness.processes import run_child


def _outcomes(result) -> str:
    return ", ".join(f"{count} {verdict}" for verdict, count in result.outcomes.items()) or "-"


def print_table(results) -> None:
    rows = [("scenario", "ops", "outcomes", "violations", "surprises", "s")]
    for result in results:
        rows.append(
            (
                result.key,
                str(len(result.ops)),
                _outcomes(result),
                str(len(result.violations)),
                str(len(result.surprises)),
                f"{result.seconds:.1f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print()
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("  ".join("-" * width for width in widths))
    for result in results:
        for line in result.violations:
            print(f"VIOLATION {result.key}: {line}")
        for line in result.surprises:
            print(f"SURPRISE  {result.key}: {line}")
    total_ops = sum(len(result.ops) for result in results)
    total_violations = sum(len(result.violations) for result in results)
    print(
        f"\n{len(results)} scenarios, {total_ops} operations, {total_violations} invariant "
        f"violations, {sum(len(r.surprises) for r in results)} surprises"
    )


def _commit() -> str:
    result = run_child(["git", "rev-parse", "--short", "HEAD"], timeout=10)
    return result.stdout.strip()


def write_history(path: Path, results) -> None:
    """Every request of every scenario and its answer, one JSON object per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for result in results:
            for op in result.ops:
                handle.write(json.dumps({"scenario": result.key, **op.as_dict()}) + "\n")


def markdown_matrix(document: dict) -> str:
    """The fault matrix of docs/reliability.md, from a report written by ``write_json``."""
    lines = [
        "| # | scenario | expected | observed | ops | violations |",
        "|---|---|---|---|---|---|",
    ]
    for result in document["results"]:
        observed = result["observed"] if not result["skipped"] else f"skipped: {result['skipped']}"
        if result["surprises"]:
            observed += " **(not as expected: " + "; ".join(result["surprises"]) + ")**"
        lines.append(
            f"| {result['key']} | {result['title']} | {result['expected']} | {observed} | "
            f"{result['operations']} | {len(result['violations'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    """``python -m tests.faults.report [faults.json]``: print the markdown fault matrix."""
    path = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).resolve().parent / "results" / "faults.json"
    )
    print(markdown_matrix(json.loads(path.read_text())))


def write_json(path: Path, results, *, seconds: float, quick: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "suite": "faults",
        "finished_at": datetime.now(tz=UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "python": platform.python_version(),
        "quick": quick,
        "seconds": round(seconds, 1),
        "scenarios": len(results),
        "operations": sum(len(result.ops) for result in results),
        "violations": sum(len(result.violations) for result in results),
        "surprises": sum(len(result.surprises) for result in results),
        "results": [result.as_dict() for result in results],
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(document, indent=2, default=str) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    main()
