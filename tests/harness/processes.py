"""Real processes the scenarios start, break and stop: PostgreSQL, Redis, gunicorn.

Everything listens on 127.0.0.1 on a port that was free a moment ago, runs in its own
process group (so a stop reaches every child), and is stopped by PID in ``stop()``. The
shared development services (55432 / 56379) are never touched: the suite starts a
PostgreSQL cluster and a redis-server of its own because it kills and restarts them.
"""

import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
import redis
from psycopg import sql

from tests.harness import HarnessError
from tests.harness.net import free_port
from tests.harness.waiting import wait_until

logger = logging.getLogger(__name__)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
PG_USER = "hoa"


def stop_group(process: subprocess.Popen | None, *, grace: float = 5.0) -> None:
    """Stop a process started with ``start_new_session=True`` and everything in its group.

    SIGCONT first: a frozen process cannot act on SIGTERM.
    """
    if process is None:
        return
    pgid = process.pid  # a session leader's group id is its own pid
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGCONT)
        os.killpg(pgid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(grace)
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        process.wait(grace)


def children_of(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (read from /proc, no extra dependency)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may contain spaces; fields after the ')' are fixed.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def process_state(pid: int) -> str:
    """One-letter state from /proc (R, S, T = stopped, Z, …); '' if the process is gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


@contextmanager
def frozen(pid: int):
    """SIGSTOP ``pid`` for the block; SIGCONT it on the way out, whatever happens."""
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: process_state(pid) in ("T", ""), timeout=5, what=f"pid {pid} to stop")
        yield pid
    finally:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _is_root() -> bool:
    return os.geteuid() == 0


# -- PostgreSQL ---------------------------------------------------------------------------


def _pg_bindir() -> Path:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "postgres").exists():
            return candidate
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    raise HarnessError("PostgreSQL server binaries not found (apt-get install postgresql)")


class PostgresCluster:
    """A throwaway PostgreSQL cluster: initdb in /var/tmp, trust auth, loopback only.

    As root the server runs as the ``postgres`` account (PostgreSQL refuses root), so its
    folder is created under /var/tmp and handed to that account.
    """

    def __init__(self):
        self.bindir = _pg_bindir()
        self.port = 0
        self.root: Path | None = None
        self.datadir: Path | None = None

    @property
    def running(self) -> bool:
        return self.postmaster_pid() is not None

    def url(self, database: str) -> str:
        return f"postgres://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60, check: bool = True):
        command = [str(self.bindir / args[0]), *args[1:]]
        if _is_root():
            command = ["runuser", "-u", "postgres", "--", *command]
        # From / so that the postgres account is not left in a folder it cannot read.
        result = subprocess.run(
            command, cwd="/", capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise HarnessError(f"{args[0]} failed: {(result.stderr or result.stdout)[-800:]}")
        return result

    def init(self) -> "PostgresCluster":
        self.root = Path(tempfile.mkdtemp(prefix="hoa-faults-pg-", dir="/var/tmp"))
        self.datadir = self.root / "data"
        if _is_root():
            account = pwd.getpwnam("postgres")
            os.chown(self.root, account.pw_uid, account.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.datadir),
            "-U",
            PG_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        )
        self.port = free_port()
        return self

    def start(self) -> "PostgresCluster":
        # fsync off: a crash of the *machine* is not among the scenarios; a crash of the
        # server is (immediate stop), and committed transactions survive that regardless.
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c fsync=off -c full_page_writes=off -c max_connections=120 "
            "-c shared_buffers=64MB"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        wait_until(self._answers, timeout=30, what=f"PostgreSQL on port {self.port}")
        return self

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.url("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: roll back open transactions; ``immediate``: crash)."""
        if self.datadir is None or not self.running:
            return
        result = self._run(
            "pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "30", "stop", check=False
        )
        if result.returncode != 0:
            pid = self.postmaster_pid()
            if pid:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def postmaster_pid(self) -> int | None:
        if self.datadir is None:
            return None
        try:
            first = (self.datadir / "postmaster.pid").read_text().split("\n", 1)[0]
        except OSError:
            return None
        pid = int(first) if first.strip().isdigit() else None
        return pid if pid and process_state(pid) not in ("", "Z") else None

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def destroy(self) -> None:
        """Stop the server (if running) and delete its folder."""
        with suppress(HarnessError, subprocess.TimeoutExpired):
            self.stop("immediate")
        pid = self.postmaster_pid()
        if pid:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


# -- Redis --------------------------------------------------------------------------------


class RedisServer:
    """A private ``redis-server`` without persistence: every restart loses its data.

    That is the case the fence must survive (a counter that starts again from zero).
    """

    def __init__(self):
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="hoa-faults-redis-"))
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **options) -> redis.Redis:
        options.setdefault("socket_timeout", 2)
        return redis.Redis(host="127.0.0.1", port=self.port, **options)

    def start(self) -> "RedisServer":
        self.process = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                "--logfile",
                "redis.log",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self._answers, timeout=10, what=f"redis-server on port {self.port}")
        return self

    def _answers(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise HarnessError(f"redis-server exited (see {self.directory}/redis.log)")
        try:
            with self.client(socket_timeout=0.5) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        if kill:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        stop_group(self.process)
        self.process = None

    def restart_empty(self) -> None:
        """Kill the server and start a fresh one on the same port: all keys are gone."""
        self.stop(kill=True)
        self.start()

    def destroy(self) -> None:
        self.stop(kill=True)
        shutil.rmtree(self.directory, ignore_errors=True)


# -- the app --------------------------------------------------------------------------------


def manage(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``manage.py`` in a child process (text output, no exception on failure)."""
    return subprocess.run(
        [sys.executable, str(BASE_DIR / "manage.py"), *args],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Gunicorn:
    """One app instance: a gunicorn master and its sync workers on a loopback port."""

    def __init__(self, *, env: dict, workers: int = 2, name: str = "app", log_dir: Path):
        self.env = env
        self.workers = workers
        self.name = name
        self.port = free_port()
        self.log_path = log_dir / f"gunicorn-{name}.log"
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        gunicorn = str(Path(sys.executable).with_name("gunicorn"))
        command = [gunicorn]
        config = BASE_DIR / "gunicorn.conf.py"
        if config.exists():
            command += ["-c", str(config)]
        # Command-line flags win over the config file: our port, our worker count, and a
        # worker timeout well above the longest pause a scenario injects.
        return [
            *command,
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(self.workers),
            "--worker-class",
            "sync",
            "--timeout",
            "60",
            "--graceful-timeout",
            "3",
            "--chdir",
            str(BASE_DIR),
            "hoa.wsgi:application",
        ]

    def start(self) -> "Gunicorn":
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command(),
            cwd=BASE_DIR,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_until(self._ready, timeout=60, what=f"gunicorn {self.name} on port {self.port}")
        return self

    def _ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise HarnessError(f"gunicorn {self.name} exited; see {self.log_path}")
        if len(self.live_workers()) < self.workers:
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def worker_pids(self) -> list[int]:
        if self.process is None:
            return []
        return children_of(self.process.pid)

    def live_workers(self) -> list[int]:
        return [pid for pid in self.worker_pids() if process_state(pid) not in ("Z", "")]

    def wait_for_workers(self, timeout: float = 30) -> list[int]:
        """Wait until the master has its full set of live workers again (after a kill)."""
        wait_until(
            lambda: len(self.live_workers()) >= self.workers,
            timeout=timeout,
            what=f"{self.workers} workers of gunicorn {self.name}",
            interval=0.1,
        )
        return self.live_workers()

    def stop(self) -> None:
        stop_group(self.process)
        self.process = None
