"""Helpers of locking's own tests: ports, waiting, child processes, private Redis servers
and a proxy that partitions a client from its Redis.

Nothing here knows a project: children run ``python -m django`` with the settings module
of the test run, and servers are started by us, on 127.0.0.1, and stopped by their pid.
(The project's harness has a richer proxy, ``tests/harness/net.py``; locking's tests may
not import the project, so they keep the little they need here.)
"""

import asyncio
import contextlib
import html.parser
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import redis
from asgiref.sync import async_to_sync
from redis.backoff import NoBackoff
from redis.retry import Retry

import locking
from locking.connection import aclose_async_lock_redis

# The directory that holds the ``locking`` package: children start there to import it.
SOURCE_ROOT = Path(locking.__file__).resolve().parent.parent
# Whether locking is the installed wheel (make test-locking-matrix), not the checkout's.
INSTALLED = Path(sysconfig.get_paths()["purelib"]).resolve() == SOURCE_ROOT
LOOPBACK = "127.0.0.1"

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], object], *, what: str = "condition", timeout: float = 30
) -> object:
    """Poll ``predicate`` every 10 ms until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def run_async(coroutine_function: Callable[[], Awaitable[T]]) -> T:
    """Run ``coroutine_function()`` from a sync test, as a sync view's ``async_to_sync`` does.

    ``sync_to_async(thread_sensitive=True)`` calls inside it come back to the test's
    thread, so they use the test's database connection. The loop's lock client is closed
    at the end: the loop goes with it.
    """

    async def main() -> T:
        try:
            return await coroutine_function()
        finally:
            await aclose_async_lock_redis()

    return async_to_sync(main)()


async def async_wait_until(
    predicate: Callable[[], object], *, what: str = "condition", timeout: float = 30
) -> object:
    """``wait_until`` for a coroutine: polls every 10 ms without blocking the loop."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


def free_port() -> int:
    """A loopback port that nobody listens on now: to start a server on, or a service down."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


closed_port = free_port


def run_django(*args: str, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``django-admin <args>`` in a child process (``env`` names the settings)."""
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=SOURCE_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class PrivateRedis:
    """A throw-away ``redis-server`` on 127.0.0.1 (no persistence unless ``extra`` asks).

    ``port`` defaults to a free one; pass the port of a stopped server, with the same
    ``directory``, to restart it (with an AOF, on its data).
    """

    def __init__(self, directory: Path, *extra: str, port: int | None = None):
        self.directory = Path(directory)
        self.port = port or free_port()
        self.url = f"redis://{LOOPBACK}:{self.port}/0"
        args = [shutil.which("redis-server") or "redis-server", "--bind", LOOPBACK]
        args += ["--port", str(self.port), "--dir", str(self.directory)]
        args += ["--save", "", "--appendonly", "no", *extra]
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.directory
        )
        try:
            wait_until(self._answers, what=f"redis-server on port {self.port}", timeout=10)
        except BaseException:
            self.stop()
            raise

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"redis-server on port {self.port} exited")
        try:
            return bool(self.client(timeout=0.5).ping())
        except (OSError, redis.RedisError):
            return False  # not listening yet, or still loading its data

    def client(self, timeout: float = 1.0) -> redis.Redis:
        # No silent retries: the tests decide themselves.
        return redis.Redis.from_url(
            self.url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def commands_processed(self, client: redis.Redis) -> int:
        return int(client.info("stats")["total_commands_processed"])

    def calls(self, client: redis.Redis, command: str) -> int:
        return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))

    def stop(self, timeout: float = 10) -> None:
        """Stop the server by its pid: TERM, then KILL if it does not exit in time."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)


class PartitionProxy:
    """A TCP proxy on 127.0.0.1 in front of a server, that can cut the two apart.

    Point a client at ``port``. ``partition()`` keeps every connection open and accepts
    new ones, but delivers nothing either way: the client learns of it only through its
    own socket timeout, as behind a real partition (no reset, no refusal). ``heal()``
    forwards again and closes the connections that lost bytes in the partition, as their
    TCP sessions would have died; idle ones go on. Threads, one per direction.
    """

    def __init__(self, target_port: int, *, target_host: str = LOOPBACK):
        self.target = (target_host, target_port)
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port = self._listener.getsockname()[1]
        self._partitioned = threading.Event()
        self._guard = threading.Lock()
        self._open: set[tuple[socket.socket, socket.socket]] = set()
        self._cut: set[tuple[socket.socket, socket.socket]] = set()
        threading.Thread(target=self._accept, name="partition-proxy", daemon=True).start()

    def partition(self) -> None:
        self._partitioned.set()

    def heal(self) -> None:
        with self._guard:
            self._partitioned.clear()
            cut, self._cut = self._cut, set()
        for pair in cut:
            self._close(pair)

    def stop(self) -> None:
        self._listener.close()
        with self._guard:
            pairs, self._open = list(self._open), set()
        for pair in pairs:
            self._close(pair)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stopped
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            pair = (client, server)
            with self._guard:
                self._open.add(pair)
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink, pair), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, pair) -> None:
        try:
            while data := source.recv(65536):
                with self._guard:
                    if self._partitioned.is_set():
                        self._cut.add(pair)
                        continue  # swallowed: the other side hears nothing
                sink.sendall(data)
        except OSError:
            pass
        self._close(pair)

    def _close(self, pair) -> None:
        with self._guard:
            self._open.discard(pair)
        for end in pair:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


class _HiddenInputs(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if tag == "input" and attributes.get("type") == "hidden" and attributes.get("name"):
            self.fields.setdefault(attributes["name"], []).append(attributes.get("value") or "")


def hidden_fields(page: str) -> dict[str, list[str]]:
    """The hidden inputs of a page, by name, as its form posts them back: what the page
    showed (a break page's lease) rides along with what the operator typed."""
    parser = _HiddenInputs()
    parser.feed(page)
    return parser.fields
