"""What every scenario gets: clients, a history, hold points, and a verdict at the end.

A scenario is a function ``run(s: Scenario)`` registered with ``@scenario(...)``. It
injects its fault, drives operations through ``s.send`` / ``s.command`` (each recorded in
the history), states what it expects with ``s.expect`` and records facts with ``s.fact``.
``run_scenario`` then runs the history checker against the database and returns a
``Result``. A broken expectation is a *surprise*; a broken invariant (something lost,
doubled or half-written) is a *violation*. Both fail the suite.
"""

import logging
import re
import subprocess
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from tests.faults.checker import check_history, summarize
from tests.faults.clients import History, Op, StaffClient, classify_command, command_args
from tests.faults.seed import World
from tests.faults.stack import Stack
from tests.harness import HarnessError
from tests.harness.http import Gate
from tests.harness.net import Tap
from tests.harness.waiting import wait_until

logger = logging.getLogger(__name__)

MAPLE = "faults-maple"
OAK = "faults-oak"
GRANTED = b"*4\r\n:1\r\n"  # the acquire script's reply when it granted the lease


@dataclass(frozen=True)
class Spec:
    key: str  # "1a-charges"
    group: int  # the scenario number
    title: str
    expected: str
    needs_private_postgres: bool = False
    # Print ``observed`` under the scenario's line as it finishes (counts worth seeing).
    show_observed: bool = False


@dataclass
class Result:
    key: str
    group: int
    title: str
    expected: str
    observed: str = ""
    ops: list[Op] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    surprises: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    seconds: float = 0.0
    skipped: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations and not self.surprises

    @property
    def outcomes(self) -> dict[str, int]:
        return summarize(self.ops)

    def as_dict(self, *, history_limit: int = 50) -> dict:
        """The report's record; a long history (the load) is summarised, not listed."""
        return {
            "key": self.key,
            "group": self.group,
            "title": self.title,
            "expected": self.expected,
            "observed": self.observed,
            "operations": len(self.ops),
            "outcomes": self.outcomes,
            "violations": self.violations,
            "surprises": self.surprises,
            "facts": self.facts,
            "seconds": round(self.seconds, 2),
            "skipped": self.skipped,
            "history": [op.as_dict() for op in self.ops] if len(self.ops) <= history_limit else [],
        }


REGISTRY: list[tuple[Spec, Callable]] = []


def find(key: str) -> tuple[Spec, Callable]:
    """The registered scenario with ``key``."""
    import tests.faults.scenarios  # noqa: F401  (registers them)

    for spec, function in REGISTRY:
        if spec.key == key:
            return spec, function
    raise KeyError(key)


def scenario(key: str, *, group: int, title: str, expected: str, **options):
    def register(function):
        REGISTRY.append((Spec(key, group, title, expected, **options), function))
        return function

    return register


class Command:
    """A management command running in the background (a cron job), recorded on finish."""

    def __init__(self, scenario: "Scenario", op: Op, process):
        self.scenario = scenario
        self.op = op
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float = 60) -> Op:
        try:
            stdout, stderr = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:  # the stack reaps the child at the end
            raise HarnessError(f"command {self.op.kind} did not finish: {exc}") from exc
        returncode = self.process.returncode
        return classify_command(self.op, returncode if returncode >= 0 else None, stdout, stderr)


class Scenario:
    def __init__(self, stack: Stack, world: World, spec: Spec):
        self.stack = stack
        self.world = world
        self.spec = spec
        self.history = History()
        self.surprises: list[str] = []
        self.violations: list[str] = []
        self.facts: dict = {}
        self.observed = ""
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix=spec.key)
        self._users = iter(world.users)
        self._holds: list = []  # gates and taps to open when the scenario ends

    # -- clients and operations ---------------------------------------------------------------

    def client(self, instance: int = 0, *, name: str = "") -> StaffClient:
        """A staff client of its own (its own user) on app instance ``instance``."""
        user = next(self._users)
        app = self.stack.apps[instance]
        return StaffClient(
            name=name or user,
            base_url=app.base_url,
            instance=app.name,
            username=user,
            session=self.world.sessions[user],
        )

    def user(self) -> str:
        return next(self._users)

    def charges(self, org: str = MAPLE, month: str | None = None) -> Op:
        return Op(
            kind="charges", org=org, org_id=self.world.org_id(org), month=month or self.month(org)
        )

    def assign(self, complaint: int, vendor: int, *, reassign: bool = False, org=MAPLE) -> Op:
        return Op(
            kind="assign",
            org=org,
            org_id=self.world.org_id(org),
            complaint=complaint,
            vendor=vendor,
            reassign=reassign,
        )

    def status(self, complaint: int, *, wish: str, org=MAPLE) -> Op:
        """A status change of ``complaint``: to ``wish`` if its page offers it."""
        return Op(
            kind="status", org=org, org_id=self.world.org_id(org), complaint=complaint, wish=wish
        )

    def pay(self, invoice: int, org=MAPLE) -> Op:
        """A payment of ``invoice`` as a person who looked at it now would post it: with the
        version its page showed (paying is a compare-and-swap on it)."""
        from django.db import DatabaseError, close_old_connections

        from vendors.models import Invoice

        op = Op(kind="pay", org=org, org_id=self.world.org_id(org), invoice=invoice)
        try:
            status, version = Invoice.objects.values_list("status", "version").get(pk=invoice)
        except DatabaseError:  # the page could not be shown: a version it never showed
            close_old_connections()
            return op
        # A page offers Pay for an approved invoice only; for another (void, paid) the
        # nemesis posts a version no page showed, answered 409 (or "already paid").
        if status == Invoice.Status.APPROVED:
            op.seen = version
        return op

    def void(self, invoice: int, org=MAPLE) -> Op | None:
        """A void of ``invoice`` as a person who looked at it now would post it; ``None``
        when it cannot be voided any more (paid, void): nobody would be offered the form."""
        from django.db import DatabaseError, close_old_connections

        from vendors.models import Invoice

        try:  # the page a person voids from: not shown while the database is away
            status, version = Invoice.objects.values_list("status", "version").get(pk=invoice)
        except DatabaseError:
            close_old_connections()
            return None
        if status not in Invoice.OWED_STATUSES:
            return None
        op = Op(kind="void", org=org, org_id=self.world.org_id(org), invoice=invoice)
        op.seen = version
        return op

    def invoice(self, org: str = MAPLE) -> int:
        """A fresh approved invoice of ``org``: a complaint no scenario used, its vendor,
        and the invoice as the workflow leaves it once approved."""
        return self.world.approved_invoice(org)

    def month(self, org: str = MAPLE) -> str:
        return self.world.take_month(org)

    def complaint(self, org: str = MAPLE) -> int:
        return self.world.take_complaint(org)

    def send(self, client: StaffClient, op: Op, *, timeout: float = 45) -> Op:
        return self.history.add(client.send(op, timeout=timeout))

    def send_later(self, client: StaffClient, op: Op, *, timeout: float = 45) -> Future:
        return self._pool.submit(self.send, client, op, timeout=timeout)

    def spawn(self, op: Op, *, user: str | None = None, **env: str) -> Command:
        """Start ``op`` as its management command; ``env`` overrides settings for it."""
        op.user = user or op.user or self.user()
        op.client = op.client or f"cron:{op.user}"
        op.via = "command"
        op.started = time.time()
        process = self.stack.spawn(*command_args(op), env=self.stack.env(**env))
        self.history.add(op)
        return Command(self, op, process)

    def command(self, op: Op, *, user: str | None = None, timeout: float = 60, **env) -> Op:
        return self.spawn(op, user=user, **env).wait(timeout)

    # -- verdicts ------------------------------------------------------------------------------

    def expect(self, condition: bool, message: str) -> bool:
        if not condition:
            self.surprises.append(message)
        return condition

    def expect_verdict(self, op: Op, *verdicts: str) -> bool:
        return self.expect(
            op.verdict in verdicts,
            f"{op.client or op.user} ({op.via}, {op.kind}): expected {' or '.join(verdicts)}, "
            f"got {op.verdict} {op.status} {op.detail[:160]!r}",
        )

    def violation(self, message: str) -> None:
        self.violations.append(message)

    def fact(self, name: str, value) -> None:
        self.facts[name] = value

    def observe(self, text: str) -> None:
        self.observed = text

    # -- hold points ------------------------------------------------------------------------------

    def watch_grant(self, resource: str, *, hold: bool = False) -> Tap:
        """Pick out the next grant of a lease on ``resource`` on its way back to the app.

        ``grant_pid(tap)`` then names the holder's process, however long the harness took
        to look (the lease itself may have expired by then).
        """
        name = resource.encode()
        tap = self.stack.redis_proxy.tap(
            b"lock:{" + name + b"}", b"fence:{" + name + b"}", reply_prefix=GRANTED, hold=hold
        )
        self._holds.append(tap)
        return tap

    def hold_call(self, predicate) -> Gate:
        """Keep the external calls ``predicate`` picks waiting at the stand-in."""
        gate = self.stack.standin.hold(predicate)
        self._holds.append(gate)
        return gate

    def wait_lock(self, resource: str, timeout: float = 10) -> str:
        """Wait until someone holds ``resource``; return the lock value."""
        return wait_until(
            lambda: self.stack.lock_value(resource), timeout=timeout, what=f"a lease on {resource}"
        )

    def wait_lock_gone(self, resource: str, timeout: float = 10) -> None:
        wait_until(
            lambda: self.stack.lock_value(resource) is None,
            timeout=timeout,
            what=f"the lease on {resource} to expire",
        )

    def database(self) -> psycopg.Connection:
        """A connection of the harness's own (not Django's), to hold locks with."""
        return psycopg.connect(self.stack.database_url, autocommit=True, connect_timeout=5)

    @contextmanager
    def table_held(self, table: str):
        """Hold a SHARE lock on ``table``: writers into it wait, readers do not.

        A worker that reaches its INSERT into ``table`` has already run its fence UPDATE
        in the same transaction; it now waits here with that transaction open. Leaving
        the block (or ``release()`` on the yielded handle) lets it go on.
        """
        connection = self.database()
        connection.autocommit = False
        try:
            connection.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(sql.Identifier(table)))
            yield _TableHold(connection)
        finally:
            connection.close()  # rolls back: the lock is gone either way

    def wait_blocked(self, statement_prefix: str, count: int = 1, timeout: float = 15) -> list[int]:
        """Wait until ``count`` backends are waiting on a lock in a statement starting so.

        Returns their backend pids.
        """
        with self.database() as connection:

            def blocked():
                rows = connection.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    # ltrim: a statement written as an indented SQL block starts with
                    # white space (vendors' conditional first-assignment INSERT).
                    "AND datname = current_database() "
                    "AND ltrim(query, E' \\t\\r\\n') LIKE %s",
                    [statement_prefix + "%"],
                ).fetchall()
                return [row[0] for row in rows] if len(rows) >= count else None

            return wait_until(
                blocked, timeout=timeout, what=f"{count} backend(s) blocked in {statement_prefix}"
            )

    def restart_postgres(self, mode: str = "fast") -> None:
        """Restart the private PostgreSQL; this process's Django connection goes with it."""
        from django.db import connections

        self.stack.postgres.restart(mode)
        connections.close_all()

    def close(self) -> None:
        """Open every hold point this scenario set, then wait for its clients."""
        for hold in self._holds:
            hold.release()
        self._pool.shutdown(wait=True, cancel_futures=False)


class _TableHold:
    def __init__(self, connection):
        self.connection = connection

    def release(self) -> None:
        self.connection.commit()


def run_scenario(stack: Stack, world: World, spec: Spec, function) -> Result:
    """Run one scenario, check its history, and return its result (never raises)."""
    from django.db import close_old_connections, connection

    result = Result(spec.key, spec.group, spec.title, spec.expected)
    if spec.needs_private_postgres and stack.postgres is None:
        result.skipped = "needs the suite's own PostgreSQL (it restarts it)"
        return result
    started = time.monotonic()
    # The stand-in's calls of this scenario only: the records of earlier ones may be gone
    # (the pytest subset empties the test database between tests).
    first_call = len(stack.standin.received)
    s = Scenario(stack, world, spec)
    try:
        function(s)
    except Exception as exc:
        # A scenario must not take the suite down with it: whatever it raised (a harness
        # timeout, an unexpected answer it could not handle) fails this scenario only.
        s.surprises.append(f"harness: {exc.__class__.__name__}: {exc}")
        s.fact("traceback", traceback.format_exc()[-2000:])
    finally:
        s.close()
        # Let frozen or killed workers come back before the next scenario.
        for app in stack.apps:
            try:
                app.wait_for_workers()
            except HarnessError as exc:
                s.surprises.append(f"harness: {exc}")
    result.ops = s.history.snapshot()
    # The checker reads through Django's connection; the database may have restarted.
    connection.close()
    close_old_connections()
    result.violations = s.violations + check_history(
        result.ops,
        received=list(stack.standin.received)[first_call:],
        units={world.org_id(slug): world.units(slug) for slug in world.organizations},
    )
    result.surprises = s.surprises
    result.facts = s.facts
    result.observed = s.observed or _describe(result)
    result.seconds = time.monotonic() - started
    return result


def _describe(result: Result) -> str:
    return ", ".join(f"{count} {verdict}" for verdict, count in result.outcomes.items())


def warm_up(stack: Stack, world: World, rounds: int = 3) -> None:
    """Let every worker import the app and open its connections before timing matters.

    A cold worker's first request takes seconds (imports, first connections, loading the
    Lua scripts), which would eat a one-second lease before any fault is injected.
    """
    user = world.users[-1]
    slug = next(iter(world.organizations))

    def client(app) -> StaffClient:
        return StaffClient(
            name="warm-up",
            base_url=app.base_url,
            instance=app.name,
            username=user,
            session=world.sessions[user],
        )

    def visit(app) -> None:
        browser = client(app)
        for path in (f"/orgs/{slug}/charges/", f"/orgs/{slug}/complaints/"):
            browser.http.get(app.base_url + path, timeout=60)
        # And the fenced path itself, on a month no scenario will use.
        op = Op(kind="charges", org=slug, org_id=world.org_id(slug), month=world.take_month(slug))
        browser.send(op, timeout=60)

    with ThreadPoolExecutor(max_workers=2 * stack.options.workers * len(stack.apps)) as pool:
        for _ in range(rounds):
            jobs = [pool.submit(visit, app) for app in stack.apps for _ in range(2)]
            for job in jobs:
                job.result()


def grant_pid(tap: Tap, timeout: float = 15) -> int:
    """The pid in the holder label of the grant ``tap`` picked out (``… pid <pid>``)."""
    request = tap.wait_arrived(timeout)
    match = re.search(rb" pid (\d+)\r\n", request)
    if match is None:
        raise HarnessError(f"no holder pid in the acquire request {request[:200]!r}")
    return int(match.group(1))
