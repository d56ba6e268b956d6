"""The async API of locking, on ``redis.asyncio``: ``AsyncFenceLock`` and ``AsyncLease``.

Classes of their own, as redis-py keeps ``redis/asyncio/lock.py`` beside ``redis/lock.py``:
the same Lua scripts (one text, one SHA), the same reading of their replies
(locking/scripts.py) and the same lease state (locking/tenure.py) as the sync
``FenceLock`` and ``Lease``, with ``await`` where those block::

    lease = await AsyncFenceLock().acquire(resource, ttl=timedelta(seconds=30))
    async with lease:                          # released on exit
        async with lease.keep_alive(cancel=True):
            ...

Import them from ``locking.asyncio``, with the fence's and the runner's async forms,
``aadvance_fence`` and ``arun_fenced``.
"""

from locking.asyncio.fence import aadvance_fence
from locking.asyncio.lease import AsyncLease
from locking.asyncio.lock import AsyncFenceLock
from locking.asyncio.operation import arun_fenced

__all__ = ["AsyncFenceLock", "AsyncLease", "aadvance_fence", "arun_fenced"]
