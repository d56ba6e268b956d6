"""Real local deployments for the topology tests: Redis Cluster, Redis Sentinel, PgBouncer,
and child processes that run fenced steps through them.

They are assembled from the harness (``tests/harness``: ``RedisServer``, ``TcpProxy``).
Every server is started by us on 127.0.0.1, on a port found free by binding it, in its
own temporary directory, as a child process we hold the ``Popen`` of; teardown stops it
by that pid (TERM, then KILL) and deletes the directory, whether the test passed or not.
The shared PostgreSQL and Redis are never touched here.

Also runnable::

    python -m tests.topologies pgbouncer-pytest [pytest args…]   # make test-pgbouncer
    python -m tests.topologies child <scenario> [args…]          # a child of the tests
"""

import os
import pwd
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from redis.exceptions import RedisError

from tests.harness.net import LOOPBACK, TcpProxy, free_port, port_is_free
from tests.harness.processes import BASE_DIR, RedisServer, start_child, stop_process, temp_dir
from tests.harness.waiting import wait_until

# -- binaries -----------------------------------------------------------------------------


def require_binary(name: str, package: str) -> str:
    """Return the path of ``name``, installing Debian's ``package`` as root if it is missing.

    Returns "" only when it cannot be had; callers skip with a clear reason then.
    """
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found or ""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", package]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        subprocess.run(install, env=env, capture_output=True, check=False)
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin") or ""


# -- Redis ----------------------------------------------------------------------------------


@dataclass
class RedisClusterDeployment:
    nodes: list[RedisServer]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(node.address for node in self.nodes)

    def client(self):
        from redis.cluster import ClusterNode, RedisCluster

        return RedisCluster(
            startup_nodes=[ClusterNode(LOOPBACK, node.port) for node in self.nodes],
            socket_timeout=5,
        )

    def node(self, port: int) -> RedisServer:
        return next(node for node in self.nodes if node.port == port)

    def _ask(self, command: str, *args, exclude: RedisServer | None = None):
        """``command`` on the first live node that answers it (not ``exclude``)."""
        for node in self.nodes:
            if node is exclude or not node.alive():
                continue
            with suppress(OSError, RedisError), node.client(socket_timeout=2) as client:
                return client.execute_command(command, *args)
        raise AssertionError(f"no cluster node answered {command}")

    def primary_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot now, as the live nodes see it."""
        slot = int(self._ask("CLUSTER KEYSLOT", key))
        for start, end, (_host, port, *_rest), *_replicas in self._ask("CLUSTER SLOTS"):
            if start <= slot <= end:
                return self.node(int(port))
        raise AssertionError(f"slot {slot} is not served")

    def replica_of(self, primary: RedisServer) -> RedisServer:
        """The replica of ``primary`` (this deployment has at most one per primary)."""
        for node in self.nodes:
            if node is primary or not node.alive():
                continue
            with node.client(socket_timeout=2) as client:
                info = client.info("replication")
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == primary.port:
                return node
        raise AssertionError(f"no replica of the node on port {primary.port}")

    def in_sync(self, replica: RedisServer) -> bool:
        """Whether ``replica``'s link to its primary is up."""
        with suppress(OSError, RedisError), replica.client(socket_timeout=2) as client:
            return client.info("replication").get("master_link_status") == "up"
        return False

    def healthy(self) -> bool:
        """Every live node says the cluster is ok and every slot is served."""
        for node in self.nodes:
            if not node.alive():
                continue
            try:
                with node.client(socket_timeout=2) as client:
                    info = client.execute_command("CLUSTER INFO")  # parsed to a dict
            except (OSError, RedisError):
                return False
            state = {_text(key): _text(value) for key, value in info.items()}
            if state["cluster_state"] != "ok" or state["cluster_slots_assigned"] != "16384":
                return False
        return True


@contextmanager
def redis_cluster(
    masters: int = 3, *, replicas: int = 0, args: tuple[str, ...] = ()
) -> Iterator[RedisClusterDeployment]:
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each, on loopback
    ports. ``args`` go to every node (e.g. persistence, so a node can crash and come back)."""
    with temp_dir("hoa-cluster-") as root, ExitStack() as stack:
        nodes = []
        for index in range(masters * (1 + replicas)):
            # The cluster bus listens on port + 10000.
            port = free_port(also_free_at=(10000,))
            cluster_args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            cluster_args += ["--cluster-node-timeout", "2000", *args]
            node = RedisServer(root / str(index), port, args=cluster_args).start()
            stack.callback(node.stop)
            nodes.append(node)
        created = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(node.address for node in nodes),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert created.returncode == 0, created.stdout + created.stderr
        deployment = RedisClusterDeployment(nodes)

        def every_node_ok() -> bool:
            if not deployment.healthy():
                return False
            return all(
                deployment.in_sync(node)
                for node in nodes
                if node.client(socket_timeout=2).info("replication").get("role") == "slave"
            )

        wait_until(every_node_ok, what="every cluster node to report cluster_state:ok", timeout=60)
        yield deployment


SENTINEL_SERVICE = "hoa-lock"


@dataclass
class SentinelDeployment:
    master: RedisServer
    replica: RedisServer
    sentinel: RedisServer
    replication_proxy: TcpProxy
    service: str = SENTINEL_SERVICE

    @property
    def url(self) -> str:
        return f"redis+sentinel://{self.sentinel.address}/{self.service}/0"

    def master_port(self) -> int:
        _host, port = self.sentinel.client().execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
        )
        return int(port)

    def replica_known_and_in_sync(self) -> bool:
        """Sentinel knows the replica and the replica's link to the master is up."""
        replicas = self.sentinel.client().execute_command("SENTINEL", "REPLICAS", self.service)
        for entry in replicas:
            fields = _pairs(entry)
            if (
                int(fields.get("port", 0)) == self.replica.port
                and fields.get("master-link-status") == "ok"
                and "s_down" not in fields.get("flags", "")
                and "disconnected" not in fields.get("flags", "")
            ):
                return True
        return False


def _pairs(entry) -> dict[str, str]:
    items = entry.items() if isinstance(entry, dict) else zip(entry[::2], entry[1::2], strict=True)
    return {_text(key): _text(value) for key, value in items}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextmanager
def redis_sentinel(*, down_after_ms: int = 1000) -> Iterator[SentinelDeployment]:
    """One master, one replica (replicating through a proxy the test can mute), one sentinel.

    Quorum 1 with a single sentinel: enough to fail over in a test, never in production
    (docs/operations.md: three sentinels on three hosts, quorum 2).
    """
    with temp_dir("hoa-sentinel-") as root, ExitStack() as stack:
        # Diskless full sync without the default 5 s wait for more replicas.
        master_args = ["--repl-diskless-sync-delay", "0"]
        master = RedisServer(root / "master", args=master_args).start()
        stack.callback(master.stop)
        proxy = TcpProxy(master.port, name="replication").start()
        stack.callback(proxy.stop)
        replica_args = ["--replicaof", LOOPBACK, str(proxy.port)]
        replica = RedisServer(root / "replica", args=replica_args).start()
        stack.callback(replica.stop)
        wait_until(
            lambda: replica.client().info("replication").get("master_link_status") == "up",
            what="the replica to sync with the master",
        )
        sentinel = RedisServer(
            root / "sentinel",
            sentinel=True,
            config=(
                f"sentinel monitor {SENTINEL_SERVICE} {LOOPBACK} {master.port} 1\n"
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} {down_after_ms}\n"
                # Long enough that Sentinel does not "fix" the replica's link through
                # the proxy back to the master's own address during a test.
                f"sentinel failover-timeout {SENTINEL_SERVICE} 60000\n"
                f"sentinel parallel-syncs {SENTINEL_SERVICE} 1\n"
            ),
        ).start()
        stack.callback(sentinel.stop)
        deployment = SentinelDeployment(master, replica, sentinel, proxy)
        wait_until(
            deployment.replica_known_and_in_sync,
            what="Sentinel to discover the replica",
            timeout=30,
        )
        yield deployment


# -- PgBouncer ------------------------------------------------------------------------------


@dataclass
class PgBouncer:
    port: int
    process: subprocess.Popen
    directory: Path
    log: Path = field(repr=False)
    user: str = "hoa"

    def database_url(self, name: str, user: str = "hoa") -> str:
        return f"postgres://{user}@{LOOPBACK}:{self.port}/{name}"

    def clients_of(self, database: str) -> int:
        """How many client connections PgBouncer holds for ``database`` now."""
        import psycopg

        # The console speaks only the simple query protocol: ClientCursor uses it.
        with psycopg.connect(
            host=LOOPBACK,
            port=self.port,
            user=self.user,
            dbname="pgbouncer",
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,
        ) as console:
            cursor = console.execute("SHOW CLIENTS")
            column = [c.name for c in cursor.description].index("database")
            return sum(1 for row in cursor if row[column] == database)


@contextmanager
def pgbouncer(
    *,
    server_host: str = LOOPBACK,
    server_port: int = 55432,
    binary: str = "pgbouncer",
    user: str = "hoa",
) -> Iterator[PgBouncer]:
    """PgBouncer in transaction-pooling mode in front of the PostgreSQL at server_port."""
    with temp_dir("hoa-pgbouncer-") as directory:
        port = free_port()
        log = directory / "pgbouncer.log"
        # auth_type trust still wants the user listed.
        (directory / "userlist.txt").write_text(f'"{user}" ""\n')
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server_host} port={server_port}\n"
            "[pgbouncer]\n"
            f"listen_addr = {LOOPBACK}\n"
            f"listen_port = {port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {directory / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"stats_users = {user}\n"
            "max_client_conn = 500\n"
            "default_pool_size = 20\n"
            f"logfile = {log}\n"
            # psycopg sends none of these, but Django's test tools might.
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        run_as = {}
        if os.geteuid() == 0:
            # PgBouncer refuses to run as root.
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                account = pwd.getpwnam("nobody")
            os.chown(directory, account.pw_uid, account.pw_gid)
            for path in directory.iterdir():
                os.chown(path, account.pw_uid, account.pw_gid)
            run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        process = subprocess.Popen(
            [binary, str(directory / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=directory,
            **run_as,
        )
        try:

            def listening() -> bool:
                if process.poll() is not None:
                    text = log.read_text(errors="replace") if log.exists() else ""
                    raise AssertionError(f"pgbouncer exited ({process.returncode}):\n{text}")
                return not port_is_free(port)

            wait_until(listening, what=f"pgbouncer on port {port}")
            yield PgBouncer(port, process, directory, log, user)
        finally:
            stop_process(process)


# -- child processes that run fenced steps ---------------------------------------------------


class Child:
    """A Python child process that says what it did on stdout and waits for "go" on stdin."""

    def __init__(self, scenario: str, *args, env: dict[str, str]):
        self.scenario = scenario
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()
        self._stderr_text = ""
        self.process = start_child(
            [sys.executable, "-m", "tests.topologies", "child", scenario, *map(str, args)],
            env=env,
            stdin=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)

    def stderr(self) -> str:
        """The child's standard error so far (all of it once the child was stopped)."""
        if self._stderr.closed:
            return self._stderr_text
        self._stderr.seek(0)
        return self._stderr.read()

    def expect(self, prefix: str, *, timeout: float = 30) -> str:
        """Return the next line, which must start with ``prefix``."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"{self.scenario}: no line within {timeout}s (wanted {prefix!r})\n"
                f"{self.stderr()[-4000:]}"
            ) from None
        if line is None:
            self.process.wait(5)
            raise AssertionError(
                f"{self.scenario} exited {self.process.returncode} before saying {prefix!r}:\n"
                f"{self.stderr()[-4000:]}"
            )
        assert line.startswith(prefix), f"{self.scenario} said {line!r}, wanted {prefix!r}"
        return line

    def go(self) -> None:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def finish(self, *, timeout: float = 30) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self.stop()

    def stop(self) -> None:
        stop_process(self.process, timeout=5)
        with suppress(OSError):
            self.process.stdin.close()
        if not self._stderr.closed:
            self._stderr_text = self.stderr()
            self._stderr.close()


def _say(line: str) -> None:
    print(line, flush=True)  # the child's protocol with the test


def _wait_for_go() -> None:
    line = sys.stdin.readline().strip()
    if line != "go":
        raise SystemExit(f"expected 'go' on stdin, got {line!r}")


def _child_fenced_note(resource: str, complaint_pk: str, ttl_ms: str) -> None:
    """Run one fenced write through run_fenced, pausing after the grant until "go"."""
    from datetime import timedelta

    from django.db import transaction

    from hoa.models import Complaint, ComplaintEvent
    from locking import LockUnavailable, StaleFencingToken, advance_fence, run_fenced
    from locking.audit import Attempt

    def work(lease):
        _say(f"granted {lease.token}")
        _wait_for_go()
        with transaction.atomic():
            advance_fence(Complaint.objects.filter(pk=int(complaint_pk)), lease)
            ComplaintEvent.objects.create(
                complaint_id=int(complaint_pk), kind="note", detail=f"token {lease.token}"
            )
        return lease.token

    try:
        token = run_fenced(
            resource,
            work,
            ttl=timedelta(milliseconds=int(ttl_ms)),
            attempt=Attempt(actor=f"child {os.getpid()}", operation="topology-test"),
        )
    except StaleFencingToken as exc:
        _say(f"stale {exc.token} {exc.recorded}")
        return
    except LockUnavailable as exc:  # e.g. replicas did not confirm, or its Redis went away
        _say(f"unavailable {exc.reason}")
        return
    _say(f"committed {token}")


def _child_fence(complaint_pk: str, token: str, hold: str) -> None:
    """advance_fence with a given token (a grant's of its own: the complaint's resource, an
    owner id per number); with hold=1, keep the transaction open until "go"."""
    from django.db import transaction

    from hoa.models import Complaint
    from locking import FencingToken, StaleFencingToken, advance_fence

    grant = FencingToken(f"topology:complaint:{complaint_pk}", int(token), f"grant-{token}")
    try:
        with transaction.atomic():
            advance_fence(Complaint.objects.filter(pk=int(complaint_pk)), grant)
            if hold == "1":
                _say("fenced")
                _wait_for_go()
    except StaleFencingToken as exc:
        _say(f"stale {exc.recorded}")
        return
    _say("committed")


def _child_advisory(name: str, mode: str) -> None:
    """Take the transaction-level advisory lock ``name``.

    mode "hold": take it and keep its transaction open until "go". Mode "retry": try,
    report, wait for "go", and try once more in a new transaction.
    """
    from django.db import transaction

    from locking.advisory import advisory_lock

    for attempt in range(2 if mode == "retry" else 1):
        if attempt:
            _wait_for_go()
        with transaction.atomic(), advisory_lock(name) as acquired:
            _say("acquired" if acquired else "busy")
            if acquired and mode == "hold":
                _wait_for_go()
        _say("ended")


def _child_busy(resource: str, operation: str) -> None:
    """Ask for a lease the test holds: run_fenced answers busy (and counts it)."""
    from datetime import timedelta

    from locking import LockHeld, run_fenced
    from locking.audit import Attempt

    try:
        run_fenced(
            resource,
            lambda lease: None,
            ttl=timedelta(seconds=5),
            attempt=Attempt(actor=f"child {os.getpid()}", operation=operation),
        )
    except LockHeld as exc:
        _say(f"busy {exc.token}")
        return
    _say("granted")


CHILD_SCENARIOS = {
    "busy": _child_busy,
    "fenced-note": _child_fenced_note,
    "fence": _child_fence,
    "advisory": _child_advisory,
}


def _run_child(scenario: str, args: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hoa.settings")
    import django

    django.setup()
    CHILD_SCENARIOS[scenario](*args)
    return 0


# -- make test-pgbouncer --------------------------------------------------------------------


def _pgbouncer_pytest(pytest_args: list[str]) -> int:
    """Run pytest with every Django connection (and every child's) going through PgBouncer.

    The test database is created through PgBouncer too and kept (``--reuse-db``): dropping
    it while PgBouncer pools server connections to it would fail. It is dropped directly on
    PostgreSQL after PgBouncer has stopped.
    """
    import dj_database_url
    import psycopg

    direct = dj_database_url.parse(
        os.environ.get("DATABASE_URL", "postgres://hoa@127.0.0.1:55432/hoa")
    )
    binary = require_binary("pgbouncer", "pgbouncer")
    if not binary:
        print("pgbouncer is not installed (apt-get install pgbouncer)", file=sys.stderr)
        return 1
    test_db = os.environ.get("TEST_DATABASE_NAME", "test_hoa") + "_pgbouncer"
    with pgbouncer(
        server_host=direct["HOST"],
        server_port=int(direct["PORT"]),
        binary=binary,
        user=direct["USER"],
    ) as bouncer:
        env = {
            **os.environ,
            "DATABASE_URL": bouncer.database_url(direct["NAME"], direct["USER"]),
            "TEST_DATABASE_NAME": test_db,
            "DISABLE_SERVER_SIDE_CURSORS": "1",
            "CONN_MAX_AGE": "0",
            # Tests that kill a client's own server backend skip themselves (see conftest).
            "HOA_VIA_PGBOUNCER": "1",
        }
        print(
            f"[test-pgbouncer] PgBouncer (transaction pooling) on 127.0.0.1:{bouncer.port} "
            f"in front of {direct['HOST']}:{direct['PORT']}; test database {test_db}",
            file=sys.stderr,
        )
        command = [sys.executable, "-m", "pytest", "--reuse-db", *pytest_args]
        status = subprocess.run(command, cwd=BASE_DIR, env=env, check=False).returncode
    with psycopg.connect(
        host=direct["HOST"],
        port=direct["PORT"],
        user=direct["USER"],
        dbname=direct["NAME"],
        autocommit=True,
    ) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{test_db}" WITH (FORCE)')
    return 1 if status == 5 else status  # "no tests collected" must not pass


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "child":
        return _run_child(argv[1], argv[2:])
    if argv and argv[0] == "pgbouncer-pytest":
        return _pgbouncer_pytest(argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
