"""A Redis primary and its replica behind a proxy, failed over by promotion (issue 26).

::

    clients ──► proxy "redis-pair" ──► primary ◄── link proxy ◄── replica (REPLICAOF)

The clients (the nemesis's processes, its gunicorn instances) know only the proxy's port,
as they would know a virtual IP or a Sentinel-managed endpoint. The replica replicates
through a second proxy, the *link*, so the harness can make replication lag for as long
as it likes: ``lag()`` stalls the link (the replica hears nothing more; the primary goes on
acknowledging writes, and a ``WAIT`` for one replica times out), which is what a paused or
partitioned replica does, without the replica buffering what it missed in its socket.

``failover()`` is what Sentinel does, in the order that matters for the fence: cut every
client connection, promote the replica (``REPLICAOF NO ONE``: it keeps what it had, and
loses whatever the link swallowed), kill the old primary, and point the proxy at the new
one. ``add_replica()`` then brings a fresh, empty replica up behind a new link and waits
until it is in sync (a ``WAIT 1`` that counts it). Until then ``LOCK_REDIS_MIN_REPLICAS=1``
refuses every grant, as it must.

Every server is a private ``RedisServer`` without persistence; ``stop()`` kills each by PID.
"""

import logging
from contextlib import suppress

import redis

from tests.harness import HarnessError
from tests.harness.net import TcpProxy
from tests.harness.processes import RedisServer
from tests.harness.waiting import wait_until

logger = logging.getLogger(__name__)

# A fresh replica's full sync starts at once (Redis 7 waits 5 s by default) and goes
# straight over the socket.
SYNC_ARGS = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")


class RedisPair:
    def __init__(self):
        self.primary: RedisServer | None = None
        self.replica: RedisServer | None = None
        self.link: TcpProxy | None = None
        self.proxy: TcpProxy | None = None
        self.failovers = 0
        self.lagging = False

    @property
    def url(self) -> str:
        """What the clients use: the proxy in front of whichever server is primary."""
        return f"redis://127.0.0.1:{self.proxy.port}/0"

    def start(self) -> "RedisPair":
        self.primary = RedisServer(args=SYNC_ARGS).start()
        self.proxy = TcpProxy(self.primary.port, name="redis-pair").start()
        self.add_replica()
        return self

    def client(self) -> redis.Redis:
        """A direct client of the primary (the harness's, not through the proxy)."""
        return self.primary.client(socket_timeout=2)

    # -- replication ------------------------------------------------------------------------

    def add_replica(self, timeout: float = 30) -> None:
        """Start an empty replica of the primary behind a new link; wait until it is in sync."""
        if self.replica is not None:
            raise HarnessError("the pair already has a replica")
        self.link = TcpProxy(self.primary.port, name="replication").start()
        replica = RedisServer(args=(*SYNC_ARGS, "--replicaof", "127.0.0.1", str(self.link.port)))
        self.replica = replica.start()
        self.lagging = False
        wait_until(self.in_sync, timeout=timeout, what="the new replica to sync", interval=0.05)

    def in_sync(self) -> bool:
        """Whether the replica has acknowledged every write the primary has made so far."""
        try:
            return int(self.client().execute_command("WAIT", 1, 100)) >= 1
        except (OSError, redis.RedisError):
            return False

    def lag(self) -> None:
        """Stall replication: the replica hears nothing more until the pair fails over."""
        self.link.set_mode("stall")
        self.lagging = True

    # -- failover -----------------------------------------------------------------------------

    def failover(self) -> bool:
        """Promote the replica, kill the old primary; return whether replication lagged.

        Clients are cut first, so no grant lands on the old primary after the promotion
        (Sentinel's clients would be told the new address the same way: by losing their
        connections). The pair has no replica afterwards: call ``add_replica()``.
        """
        lagged = self.lagging
        self.proxy.set_mode("refuse")
        self.replica.client(socket_timeout=2).execute_command("REPLICAOF", "NO", "ONE")
        old = self.primary
        self.primary, self.replica = self.replica, None
        old.destroy()
        self.link.stop()
        self.link = None
        self.proxy.target = ("127.0.0.1", self.primary.port)
        self.proxy.set_mode("pass")
        self.failovers += 1
        self.lagging = False
        return lagged

    def stop(self) -> None:
        for proxy in (self.proxy, self.link):
            if proxy is not None:
                with suppress(Exception):
                    proxy.stop()
        for server in (self.replica, self.primary):
            if server is not None:
                server.destroy()
