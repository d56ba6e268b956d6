"""A model-based check of the rules between a complaint's operations (issue 35, build item 4).

Staff members change one complaint at once, each in a thread of its own with its own
database connection, and every SQL statement they send waits at a hold point until
Hypothesis lets it through (locking/tests/stepping.py): Hypothesis chooses the interleaving,
statement by statement, among closes, reopens, resolutions, "in progress", notes, SLA
changes, first assignments and reassignments (the fenced operation, under its lease: a
holder paused past its lease and Redis losing its data are steps too). Each staff member
first reads the complaint as a page would show it, and then asks for the change it offers.

After every step, on committed data (the rule table of hoa/complaints/workflow.py):

- at most one active assignment;
- assigned or in progress means an active vendor;
- closed means no active vendor, and nothing assigned after ``closed_at``;
- the timeline holds one status event per status change a staff member was told was done
  (and one for each first assignment of an open complaint), and its order by time is the
  order the events were written in;
- the complaint's fence never goes down.

``make test`` runs a short search (``COMPLAINT_MODEL_EXAMPLES``, default 20); ``make faults``
runs it longer (``FENCE_MODEL_FAULTS=1``), and runs a control with the rule "closed is final"
taken back from the rule table, which must find a violation.
"""

import os
from datetime import timedelta

import pytest
import redis
from django.contrib.auth import get_user_model
from django.utils import timezone
from hypothesis import HealthCheck, Phase
from hypothesis import settings as search
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from hoa.answers.refusals import Refusal
from hoa.complaints.workflow import RULES, Change, add_note, change_sla, change_status
from hoa.models import Complaint, ComplaintEvent, Organization
from locking.conf import setting
from locking.keys import fence_key, lock_key
from locking.tests.stepping import SEARCH, Holder, Stepping
from tests.vendors_support import active_vendor
from vendors.models import VendorAssignment
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

FAULTS = bool(os.environ.get("FENCE_MODEL_FAULTS"))
EXAMPLES = int(os.environ.get("COMPLAINT_MODEL_EXAMPLES", "300" if FAULTS else "20"))
STEPS = 30
MAX_HOLDERS = 3
Status = Complaint.Status

# What a staff member may be told instead of "done": every refusal of the rules and of the
# fenced operation is an answer (a 4xx page, a warning), never a failure of the test.
EXPECTED = (Refusal,)

PLANS = (
    "close", "reopen", "resolve", "in_progress", "note", "sla",
    "assign:first", "assign:second", "reassign:first", "reassign:second",
)  # fmt: skip
MOVE_TO = {
    "close": Status.CLOSED,
    "reopen": Status.OPEN,
    "resolve": Status.RESOLVED,
    "in_progress": Status.IN_PROGRESS,
}


class ComplaintModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.organization, _ = Organization.objects.get_or_create(
            slug="model-court", defaults={"name": "Model Court"}
        )
        self.actor = _superuser()
        self.vendors = {
            "first": _vendor("Model Pipes", self.organization),
            "second": _vendor("Model Sparks", self.organization),
        }
        self.complaint = Complaint.objects.create(organization=self.organization, title="Model")
        self.resource = assignment_resource(self.complaint.pk)
        self.redis = redis.Redis.from_url(setting("LOCK_REDIS_URL"))
        self.stepping = Stepping(expected=EXPECTED)
        self.told_done: list[tuple[str, str]] = []  # (from, to) of each status change done
        self.highest_fence = 0

    # -- the steps -------------------------------------------------------------------------

    @rule(plan=st.sampled_from(PLANS), take_over=st.booleans())
    def start(self, plan, take_over):
        """A staff member reads the complaint and asks for a change; with ``take_over`` the
        lease of an assignment in flight has run out (its holder paused past its TTL)."""
        if self.stepping.live() >= MAX_HOLDERS:
            return  # a no-op, not a precondition: see step()
        if take_over:
            self.redis.pexpire(lock_key(self.resource), 0)
        self.stepping.start(plan, self._run)

    @rule(
        pick=st.integers(min_value=0, max_value=MAX_HOLDERS - 1),
        statements=st.sampled_from([1, 1, 1, 3, 12]),
    )
    def step(self, pick, statements):
        """The ``pick``-th staff member at a hold point sends its next statements: mostly
        one, sometimes a few, sometimes the whole change."""
        if not self.stepping.ready():
            # A no-op, not a precondition: which holders are at a hold point is the
            # threads' state, not the drawn data, and a rule enabled by one run and not
            # the next made Hypothesis stop with FlakyStrategyDefinition under load.
            return
        self.stepping.step(pick, statements)

    @rule()
    def lose_redis(self):
        """Redis loses the counter and the lease (a restart without persistence)."""
        self.redis.delete(fence_key(self.resource), lock_key(self.resource))

    # -- what must hold after every step ------------------------------------------------------

    @invariant()
    def the_complaint_keeps_its_rules(self):
        complaint = Complaint.objects.get(pk=self.complaint.pk)
        rows = list(VendorAssignment.objects.filter(complaint=complaint).order_by("pk"))
        active = [row for row in rows if row.active]
        assert len(active) <= 1, f"{len(active)} active assignments"
        if complaint.status in (Status.ASSIGNED, Status.IN_PROGRESS):
            assert active, f"{complaint.status} without an active vendor"
        if complaint.status == Status.CLOSED:
            assert not active, f"closed with assignment {active[0].pk} active"
            late = [row.pk for row in rows if row.assigned_at > complaint.closed_at]
            assert not late, f"assignments {late} made after closed_at"
        assert complaint.last_fence_token >= self.highest_fence, "the fence went back"
        self.highest_fence = complaint.last_fence_token

    @invariant()
    def the_timeline_is_one_event_per_change_in_commit_order(self):
        events = list(
            ComplaintEvent.objects.filter(complaint=self.complaint).order_by("pk")
        )  # fmt: skip
        by_time = sorted(events, key=lambda event: (event.at, event.pk))
        assert [e.pk for e in by_time] == [e.pk for e in events], "timeline out of commit order"
        moves = [
            (event.from_status, event.to_status)
            for event in events
            if event.kind == ComplaintEvent.Kind.STATUS_CHANGED
        ]
        first_assignments = moves.count((Status.OPEN, Status.ASSIGNED))
        done = self.told_done + self._in_flight_moves()
        # Every move on the timeline is a change someone was told was done (or is being
        # told: its holder has committed and not yet returned), or a first assignment's.
        unexplained = [move for move in moves if move not in done]
        assert all(move == (Status.OPEN, Status.ASSIGNED) for move in unexplained), (
            f"events without a change told done: {unexplained}"
        )
        told = [move for move in self.told_done if move != (Status.OPEN, Status.ASSIGNED)]
        assert len([m for m in moves if m != (Status.OPEN, Status.ASSIGNED)]) >= len(told), (
            f"a change told done has no event: {told} against {moves}"
        )
        assert first_assignments <= len(moves)

    def _in_flight_moves(self) -> list[tuple[str, str]]:
        return [move for holder in self.stepping.holders if (move := getattr(holder, "move", None))]

    # -- the plans (each in its holder's thread) ------------------------------------------------

    def _run(self, holder: Holder) -> None:
        complaint = Complaint.objects.get(pk=self.complaint.pk)  # the page, as it showed it
        seen = complaint.status
        showed = VendorAssignment.objects.filter(complaint=complaint, active=True).first()
        kind, _, which = holder.plan.partition(":")
        if kind in MOVE_TO:
            to = MOVE_TO[kind]
            holder.move = (seen, Status.ASSIGNED if to == Status.OPEN and showed else to)
            change = change_status(
                complaint=complaint,
                seen=seen,
                to=to,
                note=f"{kind} by {holder.name}",
                actor=self.actor,
                assigned=showed is not None,
            )
            self.told_done.append((seen, change.to))
        elif kind == "note":
            add_note(complaint=complaint, note=f"note by {holder.name}", actor=self.actor)
        elif kind == "sla":
            due = timezone.now() + timedelta(days=3, minutes=self.stepping.numbered)
            change_sla(complaint=complaint, due_at=due, reason="model", actor=self.actor)
        else:
            assign_vendor(
                complaint=complaint,
                vendor=self.vendors[which],
                actor=self.actor,
                reassign=kind == "reassign",
                replacing=showed if kind == "reassign" else None,
                seen_status=seen,
            )
        holder.outcome = "done"
        holder.move = None

    def teardown(self):
        self.stepping.finish()
        self.redis.close()


def _superuser():
    user, _ = get_user_model().objects.get_or_create(
        username="model-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    return user


def _vendor(name: str, organization: Organization):
    from vendors.models import Vendor

    existing = Vendor.objects.filter(name=name).first()
    return existing if existing is not None else active_vendor(name, organization)


@pytest.mark.slow
@pytest.mark.timeout(1800 if FAULTS else 300)
@pytest.mark.django_db(transaction=True)
def test_a_complaints_operations_keep_its_rules_whatever_the_interleaving(settings):
    settings.VENDOR_DISPATCH_URL = ""  # the dispatch call is skipped: the rules are the point
    run_state_machine_as_test(
        ComplaintModel,
        settings=search(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            phases=SEARCH,  # no shrinking: a replay of threads is close, not exact
            database=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


class WithoutClosedIsFinal(ComplaintModel):
    """Control: the rule table lets a closed complaint take a vendor (point 11 taken back)."""

    def __init__(self):
        super().__init__()
        self._kept = {change: RULES[change] for change in (Change.ASSIGN, Change.REASSIGN)}
        for change in self._kept:
            RULES[change] = frozenset(Status)

    def teardown(self):
        try:
            super().teardown()
        finally:
            RULES.update(self._kept)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not FAULTS, reason="make faults runs the control (FENCE_MODEL_FAULTS=1)")
@pytest.mark.django_db(transaction=True)
def test_the_checker_finds_closed_is_final_taken_back(settings):
    settings.VENDOR_DISPATCH_URL = ""
    with pytest.raises(AssertionError) as found:
        run_state_machine_as_test(
            WithoutClosedIsFinal,
            settings=search(
                max_examples=200,
                stateful_step_count=STEPS,
                deadline=None,
                phases=(Phase.generate,),
                database=None,
                print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    print(f"closed-is-final taken back: the checker found: {found.value}")
