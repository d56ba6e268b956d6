"""Django's PostgreSQL backend, plus a read timeout on every wait for the server.

libpq has a connect timeout but no read timeout: a query or COMMIT sent into a black-holed
network waits until the kernel gives up, or forever. ``OPTIONS["read_timeout"]``
(``DATABASE_READ_TIMEOUT_SECONDS``) bounds each wait (psycopg's ``Connection.wait``); past it
the connection is closed and the wait raises ``OperationalError``, answered 503.
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
