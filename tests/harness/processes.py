"""The processes a test starts, freezes and stops: Python and ``manage.py`` children,
redis-server, a PostgreSQL cluster, gunicorn.

Every server listens on 127.0.0.1 on a port that was free a moment ago and is stopped by
PID (``stop_process``), never by name. A server runs in its own process group, so a stop
reaches its children too. The shared development services are never touched: a test that
kills or restarts a server starts one of its own.
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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
import redis
from psycopg import sql
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.harness import HarnessError
from tests.harness.net import LOOPBACK, free_port
from tests.harness.waiting import wait_until

logger = logging.getLogger(__name__)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
PG_USER = "hoa"


# -- children -------------------------------------------------------------------------------


def manage_py(*args: object) -> list[str]:
    """The command line that runs ``manage.py`` with ``args`` under this interpreter."""
    arguments = [*map(str, args)]
    # A child's stdout is no terminal, so without -v a command is cron-quiet on success;
    # tests read its summary (the quiet default has its own tests).
    if not any(arg.startswith(("-v", "--verbosity")) for arg in arguments):
        arguments += ["-v", "1"]
    return [sys.executable, str(BASE_DIR / "manage.py"), *arguments]


def django_database_url() -> str:
    """The URL of the database this process's Django uses (the test database in pytest)."""
    from django.db import connection

    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def run_child(
    command: Sequence[str], *, env: dict | None = None, timeout: float = 60, check: bool = False
) -> subprocess.CompletedProcess:
    """Run ``command`` from the checkout, wait for it and return its result (text output)."""
    return subprocess.run(
        command, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=timeout, check=check
    )


def run_manage(*args: object, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``manage.py`` in a child process and return its result (text output)."""
    return run_child(manage_py(*args), env=env, timeout=timeout)


def start_child(command: Sequence[str], *, env: dict, **options) -> subprocess.Popen:
    """Start ``command`` from the checkout, its stdout and stderr piped as text.

    ``options`` go to ``Popen`` and win: ``stdin=subprocess.PIPE`` for a child that reads
    orders, ``start_new_session=True`` for one stopped with its group, ``text=False``.
    The caller stops it (``stop_process``).
    """
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **options}
    return subprocess.Popen(command, cwd=BASE_DIR, env=env, **options)


def start_manage(*args: object, env: dict, **options) -> subprocess.Popen:
    """Start ``manage.py`` with ``args`` in the background (see ``start_child``)."""
    return start_child(manage_py(*args), env=env, **options)


def stop_process(
    process: subprocess.Popen | None, *, timeout: float = 10, group: bool = False
) -> None:
    """Stop a child we started, by its pid: TERM, then KILL if it does not exit in time.

    ``group``: it was started with ``start_new_session=True``; the signals go to its whole
    process group (gunicorn's workers too), SIGCONT first (a frozen process cannot act on
    TERM), and the group is killed at the end whatever the leader did.
    """
    if process is None or (not group and process.poll() is not None):
        return

    def send(signum: int) -> None:
        with suppress(ProcessLookupError):
            if group:
                os.killpg(process.pid, signum)  # a session leader's group id is its pid
            elif process.poll() is None:
                process.send_signal(signum)

    if group:
        send(signal.SIGCONT)
    send(signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout)
    if group or process.poll() is None:
        send(signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout)


@contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    """A new temporary folder, deleted on the way out."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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


def freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until it is stopped (or gone)."""
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: process_state(pid) in ("T", ""), timeout=5, what=f"pid {pid} to stop")


def thaw(pid: int) -> None:
    """SIGCONT ``pid``; nothing if it is gone."""
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


@contextmanager
def frozen(pid: int):
    """``pid`` frozen (SIGSTOP) for the block, resumed on the way out whatever happens."""
    try:
        freeze(pid)
        yield pid
    finally:
        thaw(pid)


def _is_root() -> bool:
    return os.geteuid() == 0


# -- Redis ----------------------------------------------------------------------------------


class RedisServer:
    """A private ``redis-server`` on a loopback port, in ``directory`` (a new temporary one
    if not given), started by ``start()`` and stopped by PID.

    Without persistence unless ``args`` ask for it (``--appendonly yes``): a restart loses
    every key, which is the case the fence must survive. ``sentinel=True`` runs a Sentinel;
    ``config`` is written to a config file first (Sentinel needs one).
    """

    def __init__(
        self,
        directory: Path | None = None,
        port: int = 0,
        *,
        args: Sequence[str] = (),
        sentinel: bool = False,
        config: str = "",
    ):
        self.port = port or free_port()
        self._temporary = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="hoa-redis-"))
        self.args = [str(arg) for arg in args]
        self.sentinel = sentinel
        self.config = config
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://{self.address}/0"

    def client(self, **options) -> redis.Redis:
        """A client of this server; no silent retries: the tests poll and decide themselves."""
        options.setdefault("socket_timeout", 5)
        options.setdefault("retry", Retry(NoBackoff(), 0))
        return redis.Redis(host=LOOPBACK, port=self.port, **options)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "RedisServer":
        """Start the server (again, on the same port and folder) and wait for PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        log = self.directory / "redis.log"
        command = [shutil.which("redis-server") or "redis-server"]
        if self.config:
            config_file = self.directory / "redis.conf"
            config_file.write_text(self.config)
            command.append(str(config_file))
        command += ["--bind", LOOPBACK, "--port", str(self.port), "--dir", str(self.directory)]
        command += ["--save", "", "--appendonly", "no", "--logfile", str(log), *self.args]
        # A master stops at once on TERM instead of waiting for lagging replicas.
        command += ["--sentinel"] if self.sentinel else ["--shutdown-on-sigterm", "nosave", "now"]
        self.process = subprocess.Popen(
            command,
            cwd=self.directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_until(self._answers, what=f"redis-server on port {self.port}")
        except BaseException:
            self.stop(kill=True)
            raise
        return self

    def _answers(self) -> bool:
        if not self.alive():
            log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
            raise HarnessError(f"redis-server on port {self.port} exited:\n{log}")
        try:
            with self.client(socket_timeout=0.5, socket_connect_timeout=0.5) as client:
                return bool(client.ping())
        except (OSError, redis.RedisError):
            return False  # not listening yet, or still loading

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (``kill``: SIGKILL at once, a crash) and keep its folder."""
        if self.process is None:
            return
        if kill:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        stop_process(self.process, timeout=5, group=True)
        self.process = None

    def restart_empty(self) -> None:
        """Kill the server and start a fresh one on the same port: all keys are gone."""
        self.stop(kill=True)
        self.start()

    def destroy(self) -> None:
        """Kill the server; delete its folder if it was a temporary one."""
        self.stop(kill=True)
        if self._temporary:
            shutil.rmtree(self.directory, ignore_errors=True)


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


# -- gunicorn -----------------------------------------------------------------------------


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
        stop_process(self.process, timeout=5, group=True)
        self.process = None
