"""The lock state a test starts from: an empty Redis and no recorded fence epochs."""

from django.db import connections


def forget_fence_epochs(using: str = "default") -> None:
    """Delete every recorded fence epoch, on a connection outside any test transaction."""
    connection = connections.create_connection(using)
    try:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM locking_fenceepoch")
    finally:
        connection.close()
