"""Where a walk's time goes in PostgreSQL (``make bench-scale``): ``pg_stat_statements``,
``EXPLAIN (ANALYZE, BUFFERS)`` of one more chunk, what grew between two scales."""

import re

from django.db import DatabaseError, connection, transaction

THIS_DATABASE = "(SELECT oid FROM pg_database WHERE datname = current_database())"
STATEMENTS_SQL = f"""
SELECT s.queryid::text, s.query, s.calls, s.total_exec_time, s.rows, s.shared_blks_hit,
       s.shared_blks_read, s.shared_blks_dirtied, s.temp_blks_written
FROM pg_stat_statements s WHERE s.dbid = {THIS_DATABASE} ORDER BY s.total_exec_time DESC LIMIT %s
"""  # noqa: S608 - a constant
RESET_SQL = f"SELECT pg_stat_statements_reset(0, {THIS_DATABASE}, 0)"
COLUMNS = (
    "queryid", "query", "calls", "total_ms", "rows", "blks_hit", "blks_read", "blks_dirtied",
    "temp_blks_written",
)  # fmt: skip
EXPLAINABLE = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")
# Literals and parameters, as pg_stat_statements replaces them ($1 …) and as Django's
# client-side binding writes them ('text', 42, 1.5, TRUE, NULL).
_LITERALS = re.compile(r"\$\d+|'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b|\b(?:TRUE|FALSE|NULL)\b", re.I)
_LISTS = re.compile(r"\((?:\s*\?\s*,)+\s*\?\s*\)")


def available() -> bool:
    """Whether this database can report its statements (the extension loaded and created)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
    except DatabaseError:
        return False
    return True


def reset() -> None:
    """Forget this database's statements (the bench's role may: ``bench.scale`` grants it)."""
    with connection.cursor() as cursor:
        cursor.execute(RESET_SQL)


def snapshot(limit: int = 40) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS_SQL, [limit])
        found = [dict(zip(COLUMNS, row, strict=True)) for row in cursor.fetchall()]
    return [{**entry, "total_ms": round(entry["total_ms"], 3)} for entry in found]


def normalized(sql: str) -> str:
    """``sql`` with literals as ``?``: as Django sent it and as pg_stat_statements keeps it."""
    text = _LITERALS.sub("?", " ".join(sql.split()))
    return _LISTS.sub("(?)", text)


def explain(statements: list[str]) -> dict[str, str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of each distinct statement, rolled back; no ``COPY``."""
    plans: dict[str, str] = {}
    for sql in statements:
        key = normalized(sql)
        if key in plans or not sql.lstrip().upper().startswith(EXPLAINABLE):
            continue
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
                plans[key] = "\n".join(line for (line,) in cursor.fetchall())
                transaction.set_rollback(True)  # what it wrote is taken back
        except DatabaseError as exc:
            plans[key] = f"(not explained: {exc.__class__.__name__}: {exc})"
    return plans


def per_association(snapshots: list[list[dict]], associations: int) -> dict[str, dict]:
    """Statements of several runs per association, by query: calls, ms and their sums."""
    merged: dict[str, dict] = {}
    for entries in snapshots:
        for entry in entries:
            into = merged.setdefault(entry["query"], {"query": entry["query"], "calls": 0})
            into["calls"] += entry["calls"]
            into["total_ms"] = into.get("total_ms", 0) + entry["total_ms"]
            into["blks_read"] = into.get("blks_read", 0) + entry["blks_read"]
    runs = max(len(snapshots), 1) * associations
    for into in merged.values():
        into["calls_per_association"] = round(into["calls"] / runs, 3)
        into["ms_per_association"] = round(into["total_ms"] / runs, 4)
    return merged


def grown(small: dict[str, dict], large: dict[str, dict], *, factor: float, share: float) -> list:
    """Statements over ``factor`` x the smaller scale's ms (or new), ``share`` of the larger's."""
    total = sum(entry["ms_per_association"] for entry in large.values()) or 1
    found = []
    for query, entry in large.items():
        now = entry["ms_per_association"]
        before = small.get(query, {}).get("ms_per_association", 0.0)
        if now / total < share or now <= factor * before:
            continue
        calls_before = small.get(query, {}).get("calls_per_association", 0.0)
        found.append({"query": query, "ms_before": before, "ms_after": now,
                      "calls_before": calls_before, "calls_after": entry["calls_per_association"],
                      "growth": round(now / before, 2) if before else None})  # fmt: skip
    return sorted(found, key=lambda entry: entry["ms_after"] - entry["ms_before"], reverse=True)
