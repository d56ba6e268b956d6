"""PostgreSQL round trips, counted from the wire: libpq's protocol trace of one connection.

``CaptureQueriesContext`` counts the statements Django logs (``BEGIN`` and ``COMMIT``
included), not the waits for the server: a ``BEGIN`` that psycopg sends in one pipeline
with the statement after it is a logged statement but no round trip of its own. A round trip
is a ``ReadyForQuery`` the server sends back.
"""

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg


@dataclass
class RoundTrips:
    count: int = 0


@contextlib.contextmanager
def round_trips(connection) -> Iterator[RoundTrips]:
    """Count the round trips of Django's ``connection`` (this thread's) in the block."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    counted = RoundTrips()
    with tempfile.NamedTemporaryFile("w+", prefix="hoa-test-pgtrace-") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            yield counted
        finally:
            pgconn.untrace()
            trace.seek(0)
            counted.count = sum(
                1
                for line in trace
                if line.split("\t")[0] == "B" and line.split("\t")[2:3] == ["ReadyForQuery"]
            )
