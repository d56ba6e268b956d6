"""Django's PostgreSQL backend, plus a read timeout on every wait for the server.

libpq has a connect timeout but no read timeout: a query or a COMMIT sent into a
black-holed network (a partition that drops packets, a server frozen mid-answer) waits
until the kernel gives up on the socket (``tcp_user_timeout`` and keepalives, which the
settings also set), or forever when something in between still acknowledges the bytes
(a proxy, a NAT box). Then gunicorn kills the worker and the client gets no answer at all.

``OPTIONS["read_timeout"]`` (seconds; ``DATABASE_READ_TIMEOUT_SECONDS`` in hoa/settings.py)
bounds every wait for the server with psycopg's own ``Connection.wait(timeout=…)``. Past
it the connection is closed (it is in an unknown state) and the wait raises
``psycopg.OperationalError``, which Django turns into its ``OperationalError`` and
``hoa.ops.middleware`` into a 503. Whether a COMMIT that timed out took effect is unknown
to this process: the 503 says the database could not be reached, and a client that must
know reads the state again.
"""

import psycopg
from django.db.backends.postgresql import base
from psycopg import errors


class ReadTimeoutConnection(psycopg.Connection):
    """A psycopg connection whose waits for the server end after ``read_timeout`` seconds."""

    read_timeout: float | None = None

    def wait(self, gen, interval=0.1, timeout=None):
        if timeout is None and self.read_timeout:
            timeout = self.read_timeout
        try:
            return super().wait(gen, interval=interval, timeout=timeout)
        except errors._WaitTimeout:
            self.close()
            raise psycopg.OperationalError(
                f"PostgreSQL did not answer within {timeout:g} s (read timeout); "
                "the connection was closed"
            ) from None


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self):
        params = super().get_connection_params()
        params.pop("read_timeout", None)  # ours, not libpq's
        return params

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        read_timeout = self.settings_dict["OPTIONS"].get("read_timeout")
        if read_timeout and type(connection) is psycopg.Connection:
            # psycopg.connect() builds a plain Connection; this subclass only overrides
            # wait(), so the same object is re-classed rather than connected twice.
            connection.__class__ = ReadTimeoutConnection
            connection.read_timeout = float(read_timeout)
        return connection
