"""What the benchmarks run against (docs/benchmarks.md, "Against what"): a private Redis, the
``bench…`` database, the facts that make the numbers trusted, the bench's process helpers."""

import contextlib
import functools
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
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
# What every stand-in answers: a payment service's reference (billing and dispatch ignore it).
ANSWER = b'{"reference": "BENCH-PAID"}'
log = functools.partial(print, file=sys.stderr, flush=True)


def free_port() -> int:  # a loopback port that was free a moment ago
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(predicate, *, timeout: float, what: str, errors=(), interval=0.05) -> None:
    """Call ``predicate`` until it is true; one of ``errors`` raised by it means not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(*errors):
            if predicate():
                return
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def stop(process: subprocess.Popen | None, grace: float = 10) -> None:  # TERM, then KILL
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


class _StandInHandler(BaseHTTPRequestHandler):
    """An outside service (billing, dispatch, payment) answering 200, kept-alive, no Nagle."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(200, ANSWER)

    def _answer(self, status: int, content: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, format, *args) -> None:
        pass


class _ReceivingHandler(_StandInHandler):
    """The stand-in checking the token (``receive_call``, the path its scope); ``server.calls``."""

    def do_POST(self) -> None:
        from django.db import connections
        from django.http import HttpResponse

        from locking.receiving import receive_call

        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers, path = dict(self.headers.items()), self.path.split("?", 1)[0]
        try:
            receipt = receive_call(
                headers, body, lambda call: HttpResponse(ANSWER),
                scope=path.strip("/").replace("/", "-"), secret=self.server.secret,
            )  # fmt: skip
        finally:
            connections.close_all()  # this request's thread ends here
        status = receipt.response.status_code
        self.server.calls.append(
            {"path": path, "key": headers.get("Idempotency-Key", ""), "status": status,
             "token": headers.get("X-Fencing-Token", ""), "verdict": str(receipt.verdict)}
        )  # fmt: skip
        self._answer(status, receipt.response.content)


def start_stand_in(path: str, *, secret: str = "") -> tuple[ThreadingHTTPServer, str]:
    """A stand-in on a free port, in a thread, and its URL; with ``secret``, the receiving one."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ReceivingHandler if secret else _StandInHandler)
    server.daemon_threads = True
    server.secret, server.calls = secret, []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}{path}"


def start_receiver(secret: str) -> tuple[ThreadingHTTPServer, str]:  # any path below its URL
    return start_stand_in("", secret=secret)


def start_gunicorn(
    port: int, run_dir: str, *, secret_key: str, args: tuple[str, ...] = (), **extra: str
) -> subprocess.Popen:
    """gunicorn on ``port``: production settings over HTTP, the twins' URLs; once it answers."""
    env = {**os.environ, "PORT": str(port), "GUNICORN_RUN_DIR": run_dir, "WEB_CONCURRENCY": "2"}
    # Sessions signed with the bench's key; no abuse limits (they would shape the result).
    env.update(DEBUG="0", SECRET_KEY=secret_key, ALLOWED_HOSTS="127.0.0.1", STATIC_MANIFEST="0",
               SECURE_SSL_REDIRECT="0", SESSION_COOKIE_SECURE="0", CSRF_COOKIE_SECURE="0",
               RATELIMIT_ENABLE="0", LOG_LEVEL="WARNING", **extra)  # fmt: skip
    env["DJANGO_SETTINGS_MODULE"] = "bench.http_settings"  # every variant: the same URLs
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # gunicorn.conf.py sets one per run dir
    command = [sys.executable, "-m", "gunicorn", "-c", str(BASE_DIR / "gunicorn.conf.py"), *args]
    process = subprocess.Popen(
        command, cwd=BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}; see {run_dir}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
            return answer.status == 200

    try:
        wait_until(ready, timeout=60, what=f"gunicorn on {port}", errors=(OSError,))
    except BaseException:
        stop(process, grace=40)
        raise
    return process


class BenchRedis:
    """A private ``redis-server`` (default durability, plus ``args``); ``stop()`` ends it."""

    def __init__(self, *args: str):
        self.args, self.port, self.directory, self.process = args, 0, "", None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "BenchRedis":
        for _attempt in range(3):
            self.port, self.directory = free_port(), tempfile.mkdtemp(prefix="hoa-bench-redis-")
            command = [shutil.which("redis-server") or "redis-server", "--port", str(self.port)]
            command += ["--bind", "127.0.0.1", "--dir", self.directory, "--logfile", "redis.log"]
            self.process = subprocess.Popen(
                [*command, *self.args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                what, errors = f"redis-server on port {self.port}", (redis.RedisError,)
                wait_until(self._answers, timeout=10, what=what, errors=errors)
                return self
            except RuntimeError:
                self.stop()  # the port was taken between probe and bind; try another
        raise RuntimeError("could not start a private redis-server")

    def _answers(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"redis-server exited (see {self.directory}/redis.log)")
        return bool(redis.Redis(port=self.port, socket_timeout=1).ping())

    def stop(self) -> None:
        stop(self.process)
        self.process = None
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = ""


@contextlib.contextmanager
def private_redis(database: str):
    """Yield ``(env, server)``: a private ``redis-server``, every bench process's environment."""
    server = BenchRedis().start()
    try:
        env = child_env(database=database, redis_url=server.url)
        os.environ.update(env)
        yield env, server
    finally:
        server.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` and its children, from /proc (0 if it is gone)."""
    try:
        pids = [pid, *Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        stats = [Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split() for p in pids]
    except OSError:
        return 0.0
    # utime and stime, fields 14 and 15 of proc(5): the 12th and 13th after the name
    return sum(int(stat[11]) + int(stat[12]) for stat in stats) / os.sysconf("SC_CLK_TCK")


def database_url() -> str:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    if not (name := urlsplit(url).path.lstrip("/")).startswith("bench"):
        raise SystemExit(f"refusing database {name!r}: the bench empties its database")
    return url


def connect(url: str, database: str = "", *, user: str = "", **options) -> psycopg.Connection:
    parts = urlsplit(url)
    netloc = f"{user}@{parts.hostname}:{parts.port or 5432}" if user else parts.netloc
    path = f"/{database}" if database else parts.path
    target = urlunsplit(parts._replace(scheme="postgresql", netloc=netloc, path=path))
    return psycopg.connect(target, connect_timeout=5, **options)


def prepare_database(url: str) -> None:
    """Create the bench database if missing, migrate and empty it (environment: ``child_env``)."""
    import django
    from django.core.management import call_command
    from django.db import connection

    name = urlsplit(url).path.lstrip("/")
    with connect(url, "postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    django.setup()
    if not connection.settings_dict["NAME"].startswith("bench"):
        raise SystemExit(f"refusing to flush database {connection.settings_dict['NAME']!r}")
    call_command("migrate", interactive=False, verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_commit_log")  # the contention case's log
    connection.close()


def child_env(*, database: str, redis_url: str) -> dict:  # every process the bench starts
    env = {name: value for name, value in os.environ.items() if name != "TEST_DATABASE_NAME"}
    env.update(
        DJANGO_SETTINGS_MODULE="hoa.settings", DATABASE_URL=database, REDIS_URL=redis_url,
        LOCK_REDIS_URL=redis_url, SECRET_KEY=BENCH_SECRET_KEY, LOG_LEVEL="WARNING",
        BILLING_WEBHOOK_URL="", VENDOR_DISPATCH_URL="", PYTHONUNBUFFERED="1",
        DEBUG="0",  # Django's debug cursor would record every query and skew timings
        RATELIMIT_ENABLE="0",  # rate limits must not shape a throughput benchmark
        CHARGE_MONTHS_BACK="100000", CHARGE_MONTHS_AHEAD="100000",  # months from 2001 on
    )  # fmt: skip
    return env


_DISTRIBUTIONS = (
    "Django psycopg psycopg-binary redis hiredis django-redis python-redis-lock pottery "
    "gunicorn requests"
)
_PG_SETTINGS = "fsync synchronous_commit wal_sync_method full_page_writes shared_buffers"


def _proc_field(path: str, prefix: str) -> str | None:
    lines = Path("/proc", path).read_text().splitlines()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(prefix)), None)


def _git(*args: str) -> str:
    run = subprocess.run(["git", *args], cwd=BASE_DIR, capture_output=True, text=True, timeout=10)
    return run.stdout.strip()


def machine() -> dict:
    memory_kib = _proc_field("meminfo", "MemTotal:")
    return {
        "platform": platform.platform(),
        "cpu": _proc_field("cpuinfo", "model name") or platform.processor() or "unknown",
        "cpus": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(int(memory_kib.split()[0]) / 1024 / 1024, 1) if memory_kib else None,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip


def describe(*, database: str, redis_url: str) -> dict:
    installed = {d.metadata["Name"].lower(): d.version for d in importlib.metadata.distributions()}
    versions = {dist: installed.get(dist.lower()) for dist in _DISTRIBUTIONS.split()}
    versions.update(python=platform.python_version(), libpq=psycopg.pq.version())
    versions["psycopg_impl"] = psycopg.pq.__impl__
    # redis-py picks hiredis whenever it is installed, for every client here.
    versions["redis_parser"] = "hiredis" if redis.utils.HIREDIS_AVAILABLE else "python"
    client = redis.Redis.from_url(redis_url)
    versions["redis_server"] = client.info("server")["redis_version"]
    keys = ("appendonly", "appendfsync", "save")
    redis_durability = {key: client.config_get(key).get(key) for key in keys}
    client.close()
    with connect(database, "postgres") as conn:  # the server's: bench_hoa may not exist yet
        versions["postgresql_server"] = conn.execute("SHOW server_version").fetchone()[0]
        pg_durability = {
            name: conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0]
            for name in _PG_SETTINGS.split()
        }
    return {
        "machine": machine(), "versions": versions,
        "durability": {"redis": redis_durability, "postgresql": pg_durability},
        "git": {"commit": _git("rev-parse", "HEAD"), "dirty": bool(_git("status", "--porcelain"))},
        "database": urlsplit(database).path.lstrip("/"),
    }  # fmt: skip
