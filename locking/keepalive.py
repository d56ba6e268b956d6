"""Keeping a lease alive from a thread: ``with lease.keep_alive():`` (the async twin is
``AsyncKeepAlive`` in locking/asyncio/lease.py)."""

import logging
import threading
from datetime import timedelta
from typing import TYPE_CHECKING

from locking.outcomes import LeaseState

if TYPE_CHECKING:
    from locking.lease import Lease

# The lease's own log, as before the keep-alive had a module of its own.
logger = logging.getLogger("locking.lease")


class KeepAlive:
    """Background renewal of a lease, in a thread, until the block ends or the lease is lost.

    A renewal that fails leaves the lease ``UNCERTAIN`` and the thread trying again; one
    that Redis refuses, or the TTL surely passing, makes it ``LOST`` and stops the thread.
    """

    def __init__(self, lease: "Lease", ttl: timedelta):
        self.lease = lease
        self.ttl = ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"keep-alive {lease.resource}", daemon=True
        )

    def __enter__(self) -> "Lease":
        self._thread.start()
        return self.lease

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        lease = self.lease
        while not self._stop.wait(lease._tenure.renewal_pause(self.ttl)):
            if lease.state is not LeaseState.LOST and lease.extend(self.ttl):
                continue
            if lease.state is LeaseState.LOST:
                logger.warning(
                    "lease lost during keep-alive",
                    extra={"resource": lease.resource, "token": lease.token},
                )
                return
