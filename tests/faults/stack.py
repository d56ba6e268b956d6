"""The system under test, assembled from real processes.

::

    HTTP clients ──► gunicorn "a" (2 workers) ─┐                  ┌─► redis-server (private,
    HTTP clients ──► gunicorn "b" (2 workers) ─┼─► proxy "redis" ─┘    no persistence)
    commands (manage.py subprocesses) ─────────┤
                                               ├─► PostgreSQL (private cluster, or the
                                               │   test database in the pytest subset)
                                               └─► proxy "external" ─► stand-in billing /
                                                                       dispatch endpoint
                                                                       (locking's receiver)

The app reaches Redis and the external endpoint only through the proxies, so a scenario
can slow, stall or cut either wire. The apps sign their calls (``WEBHOOK_SIGNING_SECRET``)
and the stand-in receives them with locking's receiver, as a billing or dispatch service
that checks the token would: it keeps one record per key with the highest token, and
refuses a lower one with 409. The harness itself talks to Redis and PostgreSQL
directly, to look at what really happened.
"""

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.harness import HarnessError
from tests.harness.http import HttpStub
from tests.harness.net import TcpProxy
from tests.harness.processes import (
    Gunicorn,
    PostgresCluster,
    RedisServer,
    manage_py,
    run_child,
    run_manage,
    start_child,
    stop_process,
)

logger = logging.getLogger(__name__)

DATABASE_NAME = "hoa_faults"


@dataclass
class StackOptions:
    secret_key: str
    # None: start a private PostgreSQL cluster (``make faults``); else use this database
    # (the pytest subset uses its test database) and never restart it.
    database_url: str | None = None
    instances: int = 2
    workers: int = 2
    # Short leases so that "paused past the TTL" takes a second, not a minute.
    lock_ttl: float = 1.0
    # Longer than the longest hold of the stand-in in a scenario (the call must not time
    # out while a scenario keeps it waiting on purpose).
    external_timeout: float = 8.0
    redis_timeout: float = 1.0
    keep_logs: bool = False
    # What the apps sign their external calls with and the stand-in verifies.
    webhook_secret: str = field(default_factory=lambda: secrets.token_hex(16))


class Stack:
    def __init__(self, options: StackOptions):
        self.options = options
        self.run_dir = Path(tempfile.mkdtemp(prefix="hoa-faults-run-"))
        self.postgres: PostgresCluster | None = None
        self.database_url = options.database_url or ""
        self.redis_server: RedisServer | None = None
        self.redis_proxy: TcpProxy | None = None
        self.standin: HttpStub | None = None
        self.external_proxy: TcpProxy | None = None
        self.apps: list[Gunicorn] = []
        self._children: list[subprocess.Popen] = []

    # -- lifecycle --------------------------------------------------------------------------

    def start_services(self) -> "Stack":
        """PostgreSQL (if private), Redis, the stand-in endpoint and both proxies."""
        if self.options.database_url is None:
            self.postgres = PostgresCluster().init().start()
            self.database_url = self.postgres.create_database(DATABASE_NAME)
        self.redis_server = RedisServer().start()
        self.redis_proxy = TcpProxy(self.redis_server.port, name="redis").start()
        self.standin = HttpStub(secret=self.options.webhook_secret).start()
        self.external_proxy = TcpProxy(self.standin.server.server_address[1], name="external")
        self.external_proxy.start()
        return self

    def migrate(self) -> None:
        result = run_manage("migrate", "--noinput", "-v", "0", env=self.env(), timeout=300)
        if result.returncode != 0:
            raise HarnessError(f"migrate failed:\n{result.stderr[-2000:]}")

    def seed(self, users: int = 24) -> str:
        """Seed in a child process; return the world as JSON."""
        command = [sys.executable, "-m", "tests.faults.seed", str(users)]
        result = run_child(command, env=self.env(), timeout=120)
        if result.returncode != 0:
            raise HarnessError(f"seeding failed:\n{result.stderr[-2000:]}")
        return result.stdout.strip().splitlines()[-1]

    def start_apps(self) -> "Stack":
        names = "abcdefgh"
        # gunicorn.conf.py logs into GUNICORN_RUN_DIR, which must exist before it starts.
        (self.run_dir / "gunicorn").mkdir(exist_ok=True)
        for index in range(self.options.instances):
            app = Gunicorn(
                env=self.env(),
                workers=self.options.workers,
                name=names[index],
                log_dir=self.run_dir,
            )
            app.env = {
                **app.env,
                "PORT": str(app.port),
                "GUNICORN_RUN_DIR": str(self.run_dir / "gunicorn"),
                "PROMETHEUS_MULTIPROC_DIR": str(self.run_dir / f"prometheus-{app.port}"),
                # One line per event, a traceback inside it: what server_errors() reads.
                "LOG_FORMAT": "json",
            }
            self.apps.append(app.start())
        return self

    def stop(self) -> None:
        """Stop everything this stack started, by PID, in reverse order."""
        for child in self._children:
            stop_process(child, timeout=2, group=True)
        for app in self.apps:
            app.stop()
        for proxy in (self.external_proxy, self.redis_proxy):
            if proxy is not None:
                proxy.stop()
        if self.standin is not None:
            self.standin.stop()
        if self.redis_server is not None:
            self.redis_server.destroy()
        if self.postgres is not None:
            self.postgres.destroy()
        if not self.options.keep_logs:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def server_errors(self, limit: int = 3) -> list[str]:
        """The last ``limit`` 5xx the app instances logged, each with its traceback.

        A test that finds a 500 in the clients' answers says only "Something went wrong";
        what went wrong is in the app's log, which is deleted with the run directory.
        """
        found = []
        for path in sorted(self.run_dir.glob("gunicorn-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if '"level": "ERROR"' in line and '"exception"' in line:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    found.append(f"{path.name} {entry.get('message')}\n{entry['exception']}")
        return found[-limit:]

    # -- what children get --------------------------------------------------------------------

    @property
    def app_redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_proxy.port}/0"

    @property
    def external_url(self) -> str:
        return f"http://127.0.0.1:{self.external_proxy.port}"

    def env(self, **overrides: str) -> dict:
        """Environment of every app process: production settings, our services, short TTLs."""
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("TEST_DATABASE_NAME", "PROMETHEUS_MULTIPROC_DIR", "PORT")
        }
        ttl = f"{self.options.lock_ttl:g}"
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "hoa.settings",
                "DATABASE_URL": self.database_url,
                "REDIS_URL": self.app_redis_url if self.redis_proxy else "",
                "LOCK_REDIS_URL": self.app_redis_url if self.redis_proxy else "",
                "REDIS_SOCKET_TIMEOUT_SECONDS": f"{self.options.redis_timeout:g}",
                "DEBUG": "0",
                "SECRET_KEY": self.options.secret_key,
                "ALLOWED_HOSTS": "127.0.0.1,localhost",
                "SECURE_SSL_REDIRECT": "0",
                "SESSION_COOKIE_SECURE": "0",
                "CSRF_COOKIE_SECURE": "0",
                "SECURE_HSTS_SECONDS": "0",
                "STATIC_MANIFEST": "0",
                "BILLING_WEBHOOK_URL": f"{self.external_url}/billing"
                if self.external_proxy
                else "",
                "VENDOR_DISPATCH_URL": f"{self.external_url}/dispatch"
                if self.external_proxy
                else "",
                "VENDOR_PAYMENT_URL": f"{self.external_url}/payment" if self.external_proxy else "",
                "EXTERNAL_CALL_TIMEOUT_SECONDS": f"{self.options.external_timeout:g}",
                "WEBHOOK_SIGNING_SECRET": self.options.webhook_secret,
                "CHARGES_LOCK_TTL_SECONDS": ttl,
                "VENDOR_LOCK_TTL_SECONDS": ttl,
                "VENDOR_PAYMENT_LOCK_TTL_SECONDS": ttl,
                # Persistent connections, checked at the start of each request: what a
                # production deployment runs, and what a PostgreSQL restart tests.
                "CONN_MAX_AGE": "60",
                "LOG_LEVEL": "WARNING",
                "PYTHONUNBUFFERED": "1",
                # Rate limits stay on (their cache calls go through the Redis proxy too) but
                # generous: the load must be answered by the fenced operations, not a 429.
                "RATELIMIT_ENABLE": "1",
                "FENCED_POST_RATE": "100000/m",
                "FENCED_POST_IP_RATE": "100000/m",
                # Each scenario bills months nobody has used (from FIRST_MONTH on): any month.
                "CHARGE_MONTHS_BACK": "100000",
                "CHARGE_MONTHS_AHEAD": "100000",
            }
        )
        env.update(overrides)
        return env

    # -- helpers the scenarios use -----------------------------------------------------------

    def redis(self) -> redis.Redis:
        """A direct client to the private Redis (not through the proxy)."""
        return self.redis_server.client(socket_timeout=2)

    def lock_value(self, resource: str) -> str | None:
        raw = self.redis().get("lock:{" + resource + "}")
        return raw.decode() if raw is not None else None

    def counter(self, resource: str) -> int:
        raw = self.redis().get("fence:{" + resource + "}")
        return int(raw) if raw is not None else 0

    def start(self, command: list[str], **options) -> subprocess.Popen:
        """Start ``command`` in its own process group (see ``start_child``); ``stop()`` reaps it."""
        options.setdefault("env", self.env())
        child = start_child(command, start_new_session=True, **options)
        self._children.append(child)
        return child

    def spawn(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        """Start ``manage.py <args>`` in its own process group; ``stop()`` reaps it."""
        return self.start(manage_py(*args), env=env or self.env())

    def worker_pids(self) -> list[int]:
        return [pid for app in self.apps for pid in app.live_workers()]
