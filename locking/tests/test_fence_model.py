"""A model-based check of the fence at every way in (issue 35, build item 4).

Holders run fenced plans on ``FencedThing`` in threads of their own, and Hypothesis chooses
which holder sends its next SQL statement (locking/tests/stepping.py), with paused holders
and Redis losses among the steps; after each step the committed data must hold the
invariants (docs/testing.md's row). ``make test`` runs ``FENCE_MODEL_EXAMPLES`` (25);
``make faults`` (``FENCE_MODEL_FAULTS=1``) runs longer, then with the guard's triggers
dropped (``no-guard``) and ``claim_fence`` skipped (``no-claim``), where it must fail.
"""

import os
import threading
from datetime import timedelta

import pytest
import redis
from django.db import DatabaseError, IntegrityError, connection, transaction
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from locking import (
    FenceLock,
    LockHeld,
    StaleFencingToken,
    advance_fence,
    claim_fence,
    insert_fenced,
)
from locking.conf import setting
from locking.guard import install_sql, strict_sql, uninstall_sql, unstrict_sql
from locking.keys import fence_key, lock_key
from locking.models import FenceEpoch
from locking.tests.stepping import SEARCH, Holder, Stepping
from locking.tests.testapp.models import Box, FencedThing, FencedWrite

RESOURCE = "fenced-thing:model"
ROW_PK = 910_001  # the fenced row every plan works on (re-created after a delete)
OTHER_PK = 910_002  # a second row in the same box: a queryset of two rows
TTL = timedelta(seconds=60)  # expiry is forced (a pause), never waited for
MAX_HOLDERS = 3

FAULTS = bool(os.environ.get("FENCE_MODEL_FAULTS"))  # make faults: the long search, controls
EXAMPLES = int(os.environ.get("FENCE_MODEL_EXAMPLES", "400" if FAULTS else "25"))
STEPS = int(os.environ.get("FENCE_MODEL_STEPS", "40" if FAULTS else "30"))
PLANS = ("write", "twice", "create", "delete", "two_rows", "call", "savepoint", "admin_save")
# A control stops at its first find (usually well before this); 200 missed no-claim once.
CONTROL_EXAMPLES = int(os.environ.get("FENCE_MODEL_CONTROL_EXAMPLES", "600"))

# What a plan may legitimately meet: a newer holder, a busy lease, a row gone; and its own
# way of being refused (a queryset of two rows; the guard refusing an unfenced write).
EXPECTED = (StaleFencingToken, LockHeld, FencedThing.DoesNotExist)
# What a plan may be told without the fence failing: a queryset of two rows, a savepoint's
# undone fence, and Django's build-by-pk save, whose UPDATE found no row (a holder deleted
# it) and whose INSERT then met the row a creator made meanwhile: a duplicate key.
REFUSED_BY_PLAN = {
    "two_rows": ValueError,
    "savepoint": DatabaseError,
    "admin_save": DatabaseError,  # a duplicate key; with the strict guard, its refusal
}


class Refused(Exception):
    """A step of a plan that refuses after its fence (its savepoint rolls back)."""


# -- the stand-in outside service ------------------------------------------------------------


class OutsideService:
    """What a receiver keeps per key: the highest token's call; a lower token is refused."""

    def __init__(self):
        self._lock = threading.Lock()
        self.kept: dict[str, int] = {}

    def call(self, key: str, token: int) -> bool:
        with self._lock:
            if token < self.kept.get(key, 0):
                return False  # 409: a newer holder's call is kept
            self.kept[key] = token
            return True


class FenceModel(RuleBasedStateMachine):
    control = ""  # a fix taken back (the control runs' subclasses)
    plans = PLANS  # what its holders may run
    strict = False  # the guard in strict mode (its own run)

    def __init__(self):
        super().__init__()
        url = setting("LOCK_REDIS_URL")
        self.redis = redis.Redis.from_url(url)
        self.redis.delete(lock_key(RESOURCE), fence_key(RESOURCE))
        FencedWrite.objects.all().delete()
        FencedThing.objects.filter(pk__in=[ROW_PK, OTHER_PK]).delete()
        FenceEpoch.objects.filter(resource=RESOURCE).delete()
        self.box = Box.objects.get_or_create(label="model")[0]
        FencedThing.objects.create(pk=ROW_PK, name="new", box=self.box)
        if self.control == "no-guard":
            _set_guard(installed=False)
        if self.strict:  # after the clean-up above, which is no fenced write
            _set_strict(True)
        self.outside = OutsideService()
        self.stepping = Stepping(expected=EXPECTED)
        self.highest_on_row = 0

    # -- the steps -------------------------------------------------------------------------

    @rule(choice=st.integers(min_value=0, max_value=len(PLANS) - 1), take_over=st.booleans())
    def start(self, choice, take_over):
        """A new holder; with ``take_over`` the current holder has paused past its TTL."""
        if self.stepping.live() >= MAX_HOLDERS:
            return  # a no-op, not a precondition: see step()
        plan = self.plans[choice % len(self.plans)]
        if take_over:
            self.redis.pexpire(lock_key(RESOURCE), 0)
        self._after(self.stepping.start(plan, self._run))

    @rule(
        pick=st.integers(min_value=0, max_value=MAX_HOLDERS - 1),
        statements=st.sampled_from([1, 1, 1, 3, 12]),
    )
    def step(self, pick, statements):
        """The holder ``pick`` (among those at a hold point) sends its next statements:
        mostly one, sometimes a few, sometimes its whole plan."""
        if not self.stepping.ready():
            # A no-op, not a precondition: which holders are at a hold point is the
            # threads' state, not the drawn data, and a rule enabled by one run and not
            # the next made Hypothesis stop with FlakyStrategyDefinition under load.
            return
        self.stepping.step(pick, statements)
        for holder in self.stepping.holders:
            self._after(holder)

    @rule()
    def lose_redis(self):
        """Redis loses the counter and the lease (a restart without persistence)."""
        self.redis.delete(fence_key(RESOURCE), lock_key(RESOURCE))

    # -- what must hold after every step ------------------------------------------------------

    @invariant()
    def the_row_never_takes_a_lower_token(self):
        token = FencedThing.objects.filter(pk=ROW_PK).values_list("last_fence_token", flat=True)
        token = token.first()
        if token is None:  # deleted: a row created again starts its own history
            self.highest_on_row = 0
            return
        assert token >= self.highest_on_row, (
            f"the fence went back: {self.highest_on_row} -> {token}"
        )
        self.highest_on_row = token

    @invariant()
    def nothing_is_written_after_an_undone_fence(self):
        assert not FencedWrite.objects.filter(what="savepoint").exists(), (
            "a write committed after its fence was undone by a rolled-back savepoint"
        )

    @invariant()
    def writes_commit_in_grant_order(self):
        tokens = list(FencedWrite.objects.order_by("id").values_list("token", flat=True))
        assert tokens == sorted(tokens), f"an older grant wrote after a newer one: {tokens}"

    # -- the harness ---------------------------------------------------------------------------

    def _after(self, holder: Holder) -> None:
        """Once a holder is done: an attempt that told the outside and ended well must have
        left the outside and the database with the same attempt's version (checked once)."""
        if not holder.done.is_set() or getattr(holder, "checked", False):
            return
        holder.checked = True
        if holder.plan == "call" and holder.outcome in ("committed", "already_done"):
            self._outside_agrees(holder)

    def _outside_agrees(self, holder: Holder) -> None:
        committed = FencedWrite.objects.filter(what="call").order_by("-id").first()
        kept = self.outside.kept.get(RESOURCE)
        assert committed is not None and kept == committed.token, (
            f"{holder.name} ended {holder.outcome}: the outside keeps token {kept}, the "
            f"database token {committed and committed.token}"
        )

    def _run(self, holder: Holder) -> None:
        try:
            getattr(self, f"_plan_{holder.plan}")(holder)
        except REFUSED_BY_PLAN.get(holder.plan, ()) as exc:
            if not _its_own(holder, exc):
                raise
            holder.outcome = f"refused: {type(exc).__name__}"

    def _lease(self, holder: Holder):
        lease = FenceLock().acquire(RESOURCE, ttl=TTL, holder=holder.name)
        holder.token = lease.token
        return lease

    def _fenced(self, lease, queryset=None) -> None:
        advance_fence(queryset if queryset is not None else _row(), lease)

    # -- the plans (each in its holder's thread) ------------------------------------------------

    def _plan_write(self, holder):
        lease = self._lease(holder)
        with transaction.atomic():
            self._fenced(lease)
            _row().update(name=f"write {lease.token}")
            _wrote(lease, "write")
        holder.outcome = "committed"

    def _plan_twice(self, holder):
        lease = self._lease(holder)
        for step in ("started", "done"):  # one lease, two transactions
            with transaction.atomic():
                self._fenced(lease)
                _row().update(name=f"{step} {lease.token}")
                _wrote(lease, step)
        holder.outcome = "committed"

    def _plan_create(self, holder):
        lease = self._lease(holder)
        with transaction.atomic():
            again = FencedThing(pk=ROW_PK, name=f"created {lease.token}", box=self.box)
            if not insert_fenced(again, lease):
                self._fenced(lease)
                _row().update(name=f"created {lease.token}")
            _wrote(lease, "create")
        holder.outcome = "committed"

    def _plan_delete(self, holder):
        lease = self._lease(holder)
        with transaction.atomic():
            self._fenced(lease)
            _row().delete()
            _wrote(lease, "delete")
        holder.outcome = "committed"

    def _plan_two_rows(self, holder):
        lease = self._lease(holder)
        FencedThing.objects.get_or_create(pk=OTHER_PK, defaults={"name": "other", "box": self.box})
        both = FencedThing.objects.filter(box=self.box)
        with transaction.atomic():
            self._fenced(lease, both)  # two rows: refused, whatever their tokens
            both.update(name=f"both {lease.token}")
            _wrote(lease, "two rows")
        holder.outcome = "committed"

    def _plan_call(self, holder):
        """Claim, look, tell the outside, commit: the runner's order (hoa/fenced.py)."""
        lease = self._lease(holder)
        if self.control != "no-claim":
            claim_fence(lease)
        if FencedWrite.objects.filter(what="call").exists():
            with transaction.atomic():
                self._fenced(lease)
            holder.outcome = "already_done"
            return
        holder.hold("the outside call")
        if not self.outside.call(RESOURCE, lease.token):
            holder.outcome = "refused: the outside kept a newer call"
            return
        with transaction.atomic():
            self._fenced(lease)
            if FencedWrite.objects.filter(what="call").exists():
                holder.outcome = "already_done"
                return
            _row().update(name=f"called {lease.token}")
            _wrote(lease, "call")
        holder.outcome = "committed"

    def _plan_savepoint(self, holder):
        lease = self._lease(holder)
        with transaction.atomic():
            try:
                with transaction.atomic():
                    self._fenced(lease)
                    raise Refused
            except Refused:
                pass
            # The guard refuses it, if the row is still there: the rollback to the savepoint
            # released the fence's row lock, so a newer holder may have deleted the row
            # meanwhile, and then nothing is written (the checker once took that for a write).
            if not _row().update(name=f"unfenced {lease.token}"):
                holder.outcome = "nothing to write"
                return
            _wrote(lease, "savepoint")
        holder.outcome = "committed"

    def _plan_admin_save(self, holder):
        """An admin saves an instance built by pk, with no lease: every column, the token's 0
        included. It may not move the fence back."""
        FencedThing(pk=ROW_PK, name="admin", box=self.box).save()
        holder.outcome = "committed"

    def teardown(self):
        self.stepping.finish()  # let every holder run to its end
        if self.control == "no-guard":
            _set_guard(installed=True)
        if self.strict:
            _set_strict(False)
        self.redis.close()


def _row():
    return FencedThing.objects.filter(pk=ROW_PK)


def _set_guard(*, installed: bool) -> None:
    table, quote = FencedThing._meta.db_table, connection.ops.quote_name
    sql = install_sql(table, "last_fence_token", "id", quote) if installed else None
    with connection.cursor() as cursor:
        for statement in sql or uninstall_sql(table, quote):
            cursor.execute(statement)


def _set_strict(on: bool) -> None:
    table, quote = FencedThing._meta.db_table, connection.ops.quote_name
    with connection.cursor() as cursor:
        for statement in strict_sql(table, "id", quote) if on else unstrict_sql(table, quote):
            cursor.execute(statement)


def _wrote(lease, what: str) -> None:
    FencedWrite.objects.create(resource=RESOURCE, token=lease.token, what=what)


def _its_own(holder: Holder, exc: BaseException) -> bool:
    """Whether ``exc`` is the refusal ``holder``'s plan provokes (not, say, a deadlock)."""
    strict = "in a transaction that has not fenced it (strict fence guard)" in str(exc)
    if holder.plan == "savepoint":
        return "undone by a rolled-back savepoint" in str(exc) or strict
    if holder.plan == "admin_save":
        return (isinstance(exc, IntegrityError) and "duplicate key" in str(exc)) or strict
    return "one row; it matched" in str(exc)


def _search(machine, *, examples: int = EXAMPLES, phases=SEARCH) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            phases=phases,
            database=None,  # no example database in the working tree
            print_blob=True,  # a failure's reproduction, with @reproduce_failure
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.slow
@pytest.mark.timeout(1800 if FAULTS else 300)
@pytest.mark.django_db(transaction=True)
def test_the_fence_holds_at_every_way_in_whatever_the_interleaving():
    _search(FenceModel)


class WithTheStrictGuard(FenceModel):
    """The same plans with the guard strict: a savepoint's undone fence and the admin's
    save by pk are refused by strict mode; every fenced plan still writes."""

    strict = True


@pytest.mark.slow
@pytest.mark.timeout(1800 if FAULTS else 300)
@pytest.mark.django_db(transaction=True)
def test_the_fence_holds_with_the_strict_guard_whatever_the_interleaving():
    _search(WithTheStrictGuard)


class WithoutTheGuard(FenceModel):
    """Control: the fence guard's triggers dropped (issue 35, points 4 and 10 taken back)."""

    control = "no-guard"
    plans = ("write", "admin_save", "savepoint")


class WithoutTheClaim(FenceModel):
    """Control: the call plan tells the outside without claiming first (point 12)."""

    control = "no-claim"
    plans = ("call",)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not FAULTS, reason="make faults runs the controls (FENCE_MODEL_FAULTS=1)")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("machine", [WithoutTheGuard, WithoutTheClaim], ids=lambda m: m.control)
def test_the_checker_finds_a_fix_taken_back(machine):
    with pytest.raises(AssertionError) as found:
        _search(machine, examples=CONTROL_EXAMPLES, phases=(Phase.generate,))
    print(f"{machine.control}: the checker found: {found.value}")
