"""The async API of locking, on ``redis.asyncio``: ``AsyncFenceLock`` and ``AsyncLease``.

Classes of their own, as redis-py keeps ``redis/asyncio/lock.py`` beside ``redis/lock.py``,
sharing the sync classes' Lua scripts, the reading of their replies and the lease state.
The fence's and the runner's async forms are ``aadvance_fence`` and ``arun_fenced``.
"""

from locking.asyncio.fence import aadvance_fence
from locking.asyncio.lease import AsyncLease
from locking.asyncio.lock import AsyncFenceLock
from locking.asyncio.operation import arun_fenced

__all__ = ["AsyncFenceLock", "AsyncLease", "aadvance_fence", "arun_fenced"]
