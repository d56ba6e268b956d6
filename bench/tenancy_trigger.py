"""Paired probe: what the tenancy trigger (charges 0002) costs the month start's writes.

Per association, as the month start writes it: one transaction with the run row and a COPY
of its 200 charges, committed. Blocks of 50 associations alternate the trigger enabled and
disabled (``ALTER TABLE … DISABLE TRIGGER`` between blocks, untimed). It empties the
charge tables and disables a safety trigger while it runs, so it refuses any database whose
name does not end in ``_probe``:

    psql -h 127.0.0.1 -p 55432 -U postgres -c "CREATE DATABASE hoa_probe OWNER hoa"
    DEBUG=1 DATABASE_URL=postgres://hoa@127.0.0.1:55432/hoa_probe .venv/bin/python manage.py migrate
    .venv/bin/python -m bench.tenancy_trigger postgresql://hoa@127.0.0.1:55432/hoa_probe 2000

Results: docs/benchmarks.md, "The tenancy trigger's cost".
"""

import statistics
import sys
import time

import psycopg

UNITS = 200  # charges per association, as in the month-start group
BLOCK = 50  # associations per block, as the month start's chunks
TRIGGER = "charge_unit_of_its_run_on_insert"
NEW_RUN = """
INSERT INTO charges_monthlychargerun (month, last_fence_token, status, started_at, total,
                                      charge_count, completed_by, organization_id)
VALUES ('2301-01-01', 1, 'pending', now(), 0, 0, '', %s) RETURNING id
"""
COPY = "COPY charges_monthlycharge (amount, created_at, unit_id, run_id) FROM STDIN"


def fixture(conn, count: int) -> dict[int, list[int]]:
    """``count`` associations of ``UNITS`` units each, and no charge run: their units."""
    conn.execute("TRUNCATE charges_monthlycharge, charges_monthlychargerun CASCADE")
    conn.execute(
        "DELETE FROM hoa_unit WHERE organization_id IN"
        " (SELECT id FROM hoa_organization WHERE slug LIKE 'probe-%')"
    )
    conn.execute("DELETE FROM hoa_organization WHERE slug LIKE 'probe-%'")
    conn.execute(
        "INSERT INTO hoa_organization (name, slug, sla_hours_high, sla_hours_normal,"
        " sla_hours_low, created_at, time_zone)"
        " SELECT 'Probe ' || g, 'probe-' || g, 4, 24, 72, now(), 'UTC'"
        " FROM generate_series(1, %s) g",
        (count,),
    )
    conn.execute(
        "INSERT INTO hoa_unit (label, monthly_assessment, organization_id)"
        " SELECT 'U' || u, 150.00, o.id FROM hoa_organization o, generate_series(1, %s) u"
        " WHERE o.slug LIKE 'probe-%%'",
        (UNITS,),
    )
    conn.execute("ANALYZE")
    units: dict[int, list[int]] = {}
    rows = conn.execute(
        "SELECT u.organization_id, u.id FROM hoa_unit u JOIN hoa_organization o"
        " ON o.id = u.organization_id WHERE o.slug LIKE 'probe-%' ORDER BY 1, 2"
    )
    for org, unit in rows:
        units.setdefault(org, []).append(unit)
    return units


def write_month(conn, org: int, units: list[int]) -> float:
    """One association's month as the month start writes it; its seconds."""
    began = time.perf_counter()
    with conn.transaction():
        run = conn.execute(NEW_RUN, (org,)).fetchone()[0]
        block = "".join(f"150.00\t2026-12-04 00:00:00+00\t{unit}\t{run}\n" for unit in units)
        with conn.cursor().copy(COPY) as copy:
            copy.write(block)
    return time.perf_counter() - began


def main(dsn: str, count: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]
        if not name.endswith("_probe"):
            sys.exit(f"refusing database {name!r}: the probe empties the charge tables")
        units = fixture(conn, count)
        orgs = sorted(units)
        times: dict[bool, list[float]] = {True: [], False: []}
        try:
            for number, start in enumerate(range(0, len(orgs), BLOCK)):
                # Pairs of blocks, on-off then off-on, so that a table that grows (later
                # blocks slower) favours neither.
                enabled = (number % 4) in (0, 3)
                action = "ENABLE" if enabled else "DISABLE"
                conn.execute(f"ALTER TABLE charges_monthlycharge {action} TRIGGER {TRIGGER}")
                conn.execute("DISCARD PLANS")
                for org in orgs[start : start + BLOCK]:
                    times[enabled].append(write_month(conn, org, units[org]))
        finally:
            conn.execute(f"ALTER TABLE charges_monthlycharge ENABLE TRIGGER {TRIGGER}")
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"{len(times[True])} associations with the trigger, {len(times[False])} without,")
    print(f"{UNITS} charges each: median {on * 1000:.2f} ms against {off * 1000:.2f} ms")
    print(f"per association: {on / off:.3f}x, {(on - off) * 1000:.2f} ms more")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m bench.tenancy_trigger DSN [ASSOCIATIONS]")
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
