"""Loopback ports, and a small asyncio TCP proxy that puts a bad network between two ends.

``free_port()`` is a loopback port nobody listens on now: start a server on it, or use it
(as ``closed_port()``) for a service that is down, whose connections are refused at once.

``TcpProxy``: the app is pointed at the proxy's port instead of the server's (Redis, the
external endpoint, a master for its replica). The harness, from its own thread, then
changes what the wire does:

- ``pass``: forward bytes, after ``latency`` seconds per chunk if set;
- ``stall``: keep connections open but swallow every byte (a partition without a reset:
  the client only notices through its own timeout). ``heal()`` closes the stalled
  connections, as a real partition's TCP sessions would have died;
- ``mute``: swallow only what the server sends, both ends stay connected (a replica that
  stops hearing from its master while the master goes on acknowledging writes);
- ``drop``: reset every connection, new ones at once;
- ``refuse``: stop listening (connection refused, like a server that is down).

``tap(*markers, reply_prefix=…, hold=…)`` picks out one request: the first containing
every marker whose answer starts with ``reply_prefix``. The harness reads who sent it (a
lease grant carries the holder's pid in its label) and, with ``hold``, keeps the answer
back until ``release()``: the server has executed the request, only the client does not
know yet. That catches a worker the instant its lease is granted.

It runs its own event loop in a daemon thread; every public method is thread-safe.
"""

import asyncio
import logging
import socket
import threading
from contextlib import suppress
from dataclasses import dataclass, field

from tests.harness import HarnessError

logger = logging.getLogger(__name__)

MODES = ("pass", "stall", "mute", "drop", "refuse")
_CHUNK = 65536
LOOPBACK = "127.0.0.1"


def port_is_free(port: int) -> bool:
    """Whether nothing holds the loopback ``port`` now (no server listens on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port(*, also_free_at: tuple[int, ...] = ()) -> int:
    """A loopback port that is free now (bound, then released), and so is ``port + offset``
    for each offset (a Redis Cluster node also listens on port + 10000)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((LOOPBACK, 0))
            port = probe.getsockname()[1]
        if all(port + offset <= 65535 and port_is_free(port + offset) for offset in also_free_at):
            return port
    raise HarnessError("no free loopback port found")


def free_consecutive_ports(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that are free now."""
    return free_port(also_free_at=tuple(range(1, count)))


def closed_port() -> int:
    """A loopback port where nothing listens: a connection to it is refused at once."""
    return free_port()


class Tap:
    """One request picked out by the proxy (and, if asked, its reply kept back).

    ``request`` holds the matching request's bytes; ``arrived`` is set when its reply
    (starting with ``reply_prefix``) reaches the proxy. With ``hold`` the reply then waits
    until ``release()``; the server has executed the request, only the client does not
    know yet.
    """

    def __init__(self, markers: tuple[bytes, ...], reply_prefix: bytes, hold: bool):
        self.markers = markers
        self.reply_prefix = reply_prefix
        self.hold = hold
        self.request = b""
        self.arrived = threading.Event()
        self.released = threading.Event()
        self.claimed = False

    def matches_request(self, data: bytes) -> bool:
        return all(marker in data for marker in self.markers)

    def wait_arrived(self, timeout: float = 10) -> bytes:
        if not self.arrived.wait(timeout):
            raise HarnessError(f"no reply matching {self.markers!r} reached the proxy")
        return self.request

    def release(self) -> None:
        self.released.set()


@dataclass(eq=False)
class _Connection:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    stalled: bool = False
    pending: tuple[Tap, bytes] | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)

    def abort(self) -> None:
        for writer in (self.client, self.server):
            with suppress(Exception):
                writer.transport.abort()


class TcpProxy:
    def __init__(self, target_port: int, *, name: str, target_host: str = "127.0.0.1"):
        self.name = name
        self.target = (target_host, target_port)
        self.port = free_port()
        self.mode = "pass"
        self.latency = 0.0
        self.connections_seen = 0
        self._connections: set[_Connection] = set()
        self._taps: list[Tap] = []
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=name)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> "TcpProxy":
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        for tap in list(self._taps):
            tap.release()
        if self._thread.is_alive():
            with suppress(Exception):
                self._call(self._shutdown(), timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        if not self._loop.is_running():
            self._loop.close()

    # -- what the wire does -------------------------------------------------------------------

    def set_mode(self, mode: str, *, latency: float | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        if latency is not None:
            self.latency = latency
        self._call(self._apply_mode(mode))

    def heal(self) -> None:
        """Back to plain forwarding without latency; stalled connections are closed."""
        self.latency = 0.0
        self._call(self._apply_mode("pass"))

    def tap(self, *markers: bytes, reply_prefix: bytes = b"", hold: bool = False) -> Tap:
        """Pick out the next request containing every marker whose reply starts so."""
        tap = Tap(tuple(markers), reply_prefix, hold)
        self._taps.append(tap)
        return tap

    # -- the loop side --------------------------------------------------------------------------

    def _call(self, coroutine, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, "127.0.0.1", self.port, reuse_address=True
            )

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for connection in list(self._connections):
            connection.abort()
        pumps = [task for connection in self._connections for task in connection.tasks]
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        await asyncio.sleep(0)  # let each connection's accept task finish

    async def _apply_mode(self, mode: str) -> None:
        previous, self.mode = self.mode, mode
        if mode == "refuse":
            if self._server is not None:
                self._server.close()
                self._server = None
            for connection in list(self._connections):
                connection.abort()
            return
        await self._listen()
        if mode == "drop" or (previous == "stall" and mode == "pass"):
            for connection in list(self._connections):
                if mode == "drop" or connection.stalled:
                    connection.abort()
        if mode == "stall":
            for connection in self._connections:
                connection.stalled = True

    async def _accept(self, client_reader, client_writer) -> None:
        self.connections_seen += 1
        if self.mode in ("drop", "refuse"):
            client_writer.transport.abort()
            return
        try:
            server_reader, server_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.target), timeout=5
            )
        except (OSError, TimeoutError):
            client_writer.transport.abort()
            return
        connection = _Connection(client_writer, server_writer, stalled=self.mode == "stall")
        self._connections.add(connection)
        connection.tasks = [
            asyncio.create_task(self._pump(client_reader, server_writer, connection, True)),
            asyncio.create_task(self._pump(server_reader, client_writer, connection, False)),
        ]
        await asyncio.gather(*connection.tasks, return_exceptions=True)
        self._connections.discard(connection)
        connection.abort()

    async def _pump(self, reader, writer, connection: _Connection, upstream: bool) -> None:
        try:
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                if connection.stalled or self.mode == "stall":
                    connection.stalled = True
                    continue  # swallowed: the other side hears nothing
                if not upstream and self.mode == "mute":
                    continue  # the client never sees it; the server is still heard
                if upstream:
                    self._arm_hold(connection, data)
                else:
                    await self._maybe_hold(connection, data)
                if self.latency:
                    await asyncio.sleep(self.latency)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            connection.abort()

    def _arm_hold(self, connection: _Connection, data: bytes) -> None:
        for tap in self._taps:
            if not tap.claimed and tap.matches_request(data):
                connection.pending = (tap, data)
                return

    async def _maybe_hold(self, connection: _Connection, data: bytes) -> None:
        pending, connection.pending = connection.pending, None
        if pending is None:
            return
        tap, request = pending
        if tap.claimed or not data.startswith(tap.reply_prefix):
            return  # e.g. NOSCRIPT: the client retries and the tap is armed again
        tap.claimed = True
        tap.request = request
        tap.arrived.set()
        if tap.hold:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, tap.released.wait, 120)
