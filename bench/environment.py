"""What the benchmarks run against, and the facts a reader needs to trust the numbers.

- ``BenchRedis``: a ``redis-server`` of the bench's own, on a free loopback port, with the
  server's default durability (no config file: RDB snapshots, no AOF). Command counts come
  from its server-wide stats, so nothing else may talk to it; the shared instance that
  tests and the demo use is never touched.
- ``prepare_database``: the ``bench_hoa`` database (created if missing, migrated by
  ``manage.py migrate`` in a child process). It is never the demo database: the bench
  refuses a database whose name does not start with ``bench``, because it empties it.
- ``describe``: versions of everything, durability settings, the machine.
"""

import importlib.metadata
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql

BASE_DIR = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://hoa@127.0.0.1:55432/bench_hoa"
# A random-enough key for the bench's own child processes; never a deployment's.
BENCH_SECRET_KEY = "bench-only-secret-key-" + os.urandom(16).hex()


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _StandInHandler(BaseHTTPRequestHandler):
    """An external endpoint (billing, vendor dispatch) that reads the request, answers 200."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format, *args) -> None:
        pass


def start_stand_in(path: str) -> tuple[ThreadingHTTPServer, str]:
    """Serve the stand-in on a free loopback port in a daemon thread; return it and its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandInHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/{path.lstrip('/')}"


def wait_until(predicate, *, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


class BenchRedis:
    """A private ``redis-server`` with default durability; stop it with ``stop()``."""

    def __init__(self, binary: str = "redis-server"):
        self.binary = shutil.which(binary) or binary
        self.port = 0
        self.directory = ""
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "BenchRedis":
        for _attempt in range(3):
            self.port = free_port()
            self.directory = tempfile.mkdtemp(prefix="hoa-bench-redis-")
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    self.directory,
                    "--logfile",
                    "redis.log",
                    "--daemonize",
                    "no",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_until(self._answers, timeout=10, what=f"redis-server on port {self.port}")
                return self
            except RuntimeError:
                self.stop()  # the port was taken between probe and bind; try another
        raise RuntimeError("could not start a private redis-server")

    def _answers(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"redis-server exited (see {self.directory}/redis.log)")
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = ""


def database_url() -> str:
    """The bench database URL (``BENCH_DATABASE_URL``), refused unless it is a bench one."""
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    name = urlsplit(url).path.lstrip("/")
    if not name.startswith("bench"):
        raise SystemExit(
            f"refusing to benchmark in database {name!r}: the bench empties its database, "
            "so its name must start with 'bench' (set BENCH_DATABASE_URL)"
        )
    return url


def _libpq_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


def prepare_database(url: str, env: dict) -> None:
    """Create the bench database if it is missing, then migrate it in a child process."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True, connect_timeout=5) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    result = subprocess.run(
        [sys.executable, str(BASE_DIR / "manage.py"), "migrate", "--noinput", "-v", "0"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"migrating the bench database failed:\n{result.stderr[-2000:]}")


def child_env(*, database: str, redis_url: str) -> dict:
    """Environment for every process the bench starts: bench database, private Redis."""
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "hoa.settings",
            "DATABASE_URL": database,
            "REDIS_URL": redis_url,
            "LOCK_REDIS_URL": redis_url,
            # DEBUG off: Django's debug cursor would record every query and skew timings.
            "DEBUG": "0",
            "SECRET_KEY": BENCH_SECRET_KEY,
            "LOG_LEVEL": "WARNING",
            "BILLING_WEBHOOK_URL": "",
            "VENDOR_DISPATCH_URL": "",
            # Rate limits (if configured) must not shape a throughput benchmark.
            "RATELIMIT_ENABLE": "0",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("TEST_DATABASE_NAME", None)
    return env


# -- facts for the report ----------------------------------------------------------------

_DISTRIBUTIONS = [
    "Django",
    "psycopg",
    "psycopg-binary",
    "redis",
    "hiredis",
    "django-redis",
    "python-redis-lock",
    "pottery",
    "gunicorn",
    "requests",
]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _git() -> dict:
    def run(*args: str) -> str:
        result = subprocess.run(
            ["git", *args], cwd=BASE_DIR, capture_output=True, text=True, check=False, timeout=10
        )
        return result.stdout.strip()

    return {"commit": run("rev-parse", "HEAD"), "dirty": bool(run("status", "--porcelain"))}


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_gib": _memory_gib(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def describe(*, database: str, redis_url: str) -> dict:
    """Versions, durability settings and the machine, as the JSON report records them."""
    versions = {"python": platform.python_version()}
    for dist in _DISTRIBUTIONS:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    versions["libpq"] = psycopg.pq.version()
    versions["psycopg_impl"] = psycopg.pq.__impl__
    versions["redis_parser"] = (
        "hiredis" if redis.utils.HIREDIS_AVAILABLE else "python"
    )  # redis-py picks hiredis whenever it is installed, for every client here

    client = redis.Redis.from_url(redis_url)
    info = client.info("server")
    versions["redis_server"] = info["redis_version"]
    redis_durability = {
        key: client.config_get(key).get(key) for key in ("appendonly", "appendfsync", "save")
    }
    client.close()

    with psycopg.connect(_libpq_url(database), connect_timeout=5) as conn:
        versions["postgresql_server"] = conn.execute("SHOW server_version").fetchone()[0]
        pg_durability = {
            name: conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0]
            for name in (
                "fsync",
                "synchronous_commit",
                "wal_sync_method",
                "full_page_writes",
                "shared_buffers",
            )
        }
    return {
        "machine": machine(),
        "versions": versions,
        "durability": {"redis": redis_durability, "postgresql": pg_durability},
        "git": _git(),
        "database": urlsplit(database).path.lstrip("/"),
    }
