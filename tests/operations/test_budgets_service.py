"""The third fenced operation, budget approval, against real PostgreSQL, Redis and HTTP.

The races force their interleaving as charges' and vendors' do: the board stand-in holds a
chosen holder's notification (``http_stub.hold``) until the test releases it, and a short
TTL lets that holder's lease run out while it waits.
"""

import threading
from collections import Counter
from datetime import timedelta

import pytest

from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LeaseRanOut,
    LockServiceDown,
    NotPermitted,
    OutcomeUnknown,
    Superseded,
)
from hoa.models import AccessDenial
from locking import FenceLock, Outcome
from locking.keys import fence_key, lock_key
from tests.budgets.answers import AmountChanged, NoBudget
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import APPROVAL, budget_resource
from tests.budgets_support import (
    AMOUNT,
    YEAR,
    approve,
    events,
    state_of,
    wait_for_lease_expiry,
)
from tests.charges_support import Worker, dead_redis_url
from tests.harness.waiting import wait_until

# The service runs its own transactions: its tests use real commits.
pytestmark = pytest.mark.django_db(transaction=True)

DRAFT = ("draft", "", 0, AMOUNT)


@pytest.fixture
def short_ttl(settings):
    settings.BUDGETS_LOCK_TTL_SECONDS = 0.3


# -- one caller ------------------------------------------------------------------------------


def test_approval_notifies_the_board_once_then_approves_under_token_1(maple, budget, board):
    result = approve(maple, actor="cron-a")

    assert (result.outcome, result.token) == (Outcome.COMMITTED, 1)
    assert result.message == "Approved the 2027 budget of Maple Court ($120,000.00)."
    assert state_of(budget) == ("approved", "cron-a", 1, AMOUNT)
    assert budget.approved_at is not None
    [request] = board.received
    assert request.idempotency_key == f"budget-approval:{maple.pk}:2027:120000.00"
    assert request.token == 1
    body = request.json
    assert (body["event"], body["year"], body["amount"]) == ("budget.approved", 2027, "120000.00")
    assert body["organization"] == {"id": maple.pk, "slug": "maple-court"}
    assert events(maple) == [("committed", 1)]


def test_repeat_is_already_approved_and_tells_the_board_nothing_more(maple, budget, board):
    approve(maple, actor="cron-a")
    again = approve(maple, actor="cron-b")

    assert (again.outcome, again.token) == (Outcome.ALREADY_DONE, 2)
    assert again.message == "The 2027 budget of Maple Court was already approved ($120,000.00)."
    assert state_of(budget) == ("approved", "cron-a", 2, AMOUNT)  # the repeat passed the fence
    assert len(board.received) == 1
    assert events(maple) == [("committed", 1), ("already_done", 2)]


def test_without_a_notification_url_the_call_is_skipped_and_the_budget_approved(maple, budget):
    assert approve(maple).committed
    assert state_of(budget)[:3] == ("approved", "cron-a", 1)


def test_a_token_at_or_below_the_one_on_the_row_the_look_read_tells_nobody(maple, budget, board):
    # The row carries a token its resource's record never did (fenced under another name,
    # or the Redis counter went behind): the runner refuses the look's token before any
    # call, generically (Look.fenced), and run_fenced recovers with a token above it.
    AnnualBudget.objects.filter(pk=budget.pk).update(last_fence_token=3)

    result = approve(maple)

    assert result.committed and result.token > 3
    assert [request.token for request in board.received] == [result.token]
    assert events(maple) == [("stale", 1), ("committed", result.token)]


def test_a_user_must_be_staff_of_the_organization_with_the_permission(
    maple, budget, board, mallory, viewer, alice
):
    for outsider in (mallory, viewer):
        with pytest.raises(NotPermitted) as refused:
            approve(maple, actor=outsider)
        assert refused.value.organization == maple
    assert str(refused.value) == "viewer may not approve the budgets of Maple Court."
    assert state_of(budget) == DRAFT
    assert board.received == [] and events(maple) == []
    assert AccessDenial.objects.filter(operation="budget-approval").count() == 2

    assert approve(maple, actor=alice).committed
    assert state_of(budget)[:2] == ("approved", "alice")


def test_a_year_without_a_budget_is_refused_before_anything_is_locked(
    maple, budget, board, redis_client
):
    with pytest.raises(NoBudget) as refused:
        approve(maple, year=2031)
    assert str(refused.value) == "Maple Court has no budget for 2031 to approve."
    assert board.received == [] and events(maple, 2031) == []
    resource = budget_resource(maple, 2031)
    assert redis_client.exists(lock_key(resource), fence_key(resource)) == 0


def test_a_busy_budget_is_refused_naming_the_holder_and_writes_nothing(maple, budget, board):
    held = FenceLock().acquire(
        budget_resource(maple, YEAR), ttl=timedelta(seconds=30), holder="bob at the front desk"
    )
    with pytest.raises(Busy) as refused:
        approve(maple)
    held.release()

    assert refused.value.holder.startswith("bob at the front desk on ")
    assert "Another holder (bob at the front desk on " in str(refused.value)
    assert state_of(budget) == DRAFT
    assert board.received == []
    assert events(maple) == [("busy", 1)]


def test_a_refused_notification_writes_nothing_and_is_recorded_as_failed(maple, budget, board):
    board.status = 422
    with pytest.raises(CallFailed) as refused:
        approve(maple)
    assert "(HTTP 422)" in str(refused.value)
    assert state_of(budget) == DRAFT  # the transaction, fence included, never ran
    assert events(maple) == [("failed", 1)]


def test_a_notification_that_times_out_is_unknown_not_failed(maple, budget, board, settings):
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 0.2
    board.delay = 1
    with pytest.raises(OutcomeUnknown) as unknown:
        approve(maple)
    assert "(timed out)" in str(unknown.value)
    assert state_of(budget) == DRAFT
    assert events(maple) == [("unknown", 1)]


def test_redis_down_is_reported_and_writes_nothing(maple, budget, board, settings):
    settings.LOCK_REDIS_URL = dead_redis_url()
    with pytest.raises(LockServiceDown) as refused:
        approve(maple)
    assert "was not done: the lock service (Redis) is unavailable (" in str(refused.value)
    assert state_of(budget) == DRAFT
    assert board.received == []
    assert events(maple) == [("unavailable", None)]


def test_a_lease_that_ran_out_before_the_call_is_told_in_the_budgets_words(maple):
    """The runner's ``lease.check()`` before the call is charges' and vendors' to prove
    (tests/races/test_lease_check.py); the frame says the refusal it raises here in the budgets'
    words (``answers.WORDS``): what was being done and whom the call would have told."""
    refused = LeaseRanOut(
        operation=APPROVAL,
        resource=budget_resource(maple, YEAR),
        token=3,
        reason="expired",
        organization=maple,
        year=YEAR,
    )
    assert refused.message == (
        "Approving the 2027 budget of Maple Court took too long and was stopped before the "
        "board was told; nothing was sent or saved. Try again."
    )
    assert str(refused) == (
        "Approving the 2027 budget of Maple Court took too long and was stopped (token 3: "
        "expired) before the board was told; nothing was sent or saved. Try again."
    )
    assert (refused.answer, refused.outcome) == ("retry", Outcome.LOST)


# -- races -----------------------------------------------------------------------------------


def test_eight_concurrent_approvals_approve_once_and_every_loser_is_busy(maple, budget, board):
    gate = board.hold()  # the winner waits in its notification until every loser answered
    barrier = threading.Barrier(8, timeout=15)
    workers = [
        Worker(lambda n=n: approve(maple, actor=f"worker-{n}"), barrier=barrier) for n in range(8)
    ]
    gate.wait_arrived(1)
    wait_until(lambda: sum(w.done.is_set() for w in workers) == 7, what="seven losers")
    gate.release()
    for worker in workers:
        worker.join()

    outcomes = Counter(
        Outcome.BUSY if isinstance(w.error, Busy) else w.result.outcome for w in workers
    )
    assert outcomes == {Outcome.BUSY: 7, Outcome.COMMITTED: 1}
    [winner] = [w.result for w in workers if w.result is not None]
    assert state_of(budget) == ("approved", winner.row.approved_by, 1, AMOUNT)
    assert len(board.received) == 1


def test_a_paused_holder_is_refused_by_the_fence_after_a_newer_holder_approves(
    maple, budget, board, short_ttl, redis_client
):
    # The board accepts A's call (token 1); the answer hangs, so the fence must refuse A.
    gate = board.hold(lambda request: request.token == 1, answered=True)
    holder_a = Worker(lambda: approve(maple, actor="holder-a"))
    gate.wait_arrived(1)
    wait_for_lease_expiry(redis_client, maple)

    newer = approve(maple, actor="holder-b")  # takes over: token 2, notifies, approves
    gate.release()
    holder_a.join()

    assert (newer.outcome, newer.token) == (Outcome.COMMITTED, 2)
    assert isinstance(holder_a.error, Superseded)
    assert (holder_a.error.token, holder_a.error.recorded) == (1, 2)
    assert "A newer holder (token 2) took over approving the 2027 budget" in str(holder_a.error)
    assert state_of(budget) == ("approved", "holder-b", 2, AMOUNT)
    assert events(maple) == [("committed", 2), ("stale", 1)]
    # The board saw both holders, with the same key and increasing tokens.
    assert sorted(request.token for request in board.received) == [1, 2]
    assert len({request.idempotency_key for request in board.received}) == 1


def test_an_older_holder_returning_first_cannot_commit_after_the_newer_ones_claim(
    maple, budget, board, short_ttl, redis_client
):
    """The frame's claim holds for the third operation too (issue 35, point 12): the newer
    holder claimed before its call, so the older one, back first, is refused at its commit,
    and the budget is approved by the holder whose call the board keeps."""
    gate_a = board.hold(lambda request: request.token == 1)
    gate_b = board.hold(lambda request: request.token == 2)
    holder_a = Worker(lambda: approve(maple, actor="holder-a"))
    gate_a.wait_arrived(1)
    wait_for_lease_expiry(redis_client, maple)
    holder_b = Worker(lambda: approve(maple, actor="holder-b"))
    gate_b.wait_arrived(1)  # both are past their claims, inside their calls

    gate_a.release()  # the older holder returns first: the newer one's claim refuses it
    holder_a.join()
    gate_b.release()  # the newer one's call replaces the older one's; it commits
    holder_b.join()

    assert holder_a.result is None and (holder_a.error.token, holder_a.error.recorded) == (1, 2)
    assert (holder_b.result.outcome, holder_b.result.token) == (Outcome.COMMITTED, 2)
    assert state_of(budget) == ("approved", "holder-b", 2, AMOUNT)
    assert sorted(events(maple), key=lambda event: event[1]) == [
        ("stale", 1),
        ("committed", 2),
    ]


def test_an_amount_changed_while_the_board_was_told_is_refused_and_says_so(maple, budget, board):
    """The state check is more than "already done": the board was told 120,000; the draft
    says 125,000 at commit, so nothing is approved and the audit names whom it told."""
    gate = board.hold()
    holder = Worker(lambda: approve(maple, actor="cron-a"))
    gate.wait_arrived(1)
    AnnualBudget.objects.filter(pk=budget.pk).update(amount=AMOUNT + 5000)  # staff edit it
    gate.release()
    holder.join()

    assert isinstance(holder.error, AmountChanged)
    assert (holder.error.notified, holder.error.amount) == (AMOUNT, AMOUNT + 5000)
    assert str(holder.error) == (
        "The 2027 budget of Maple Court changed to $125,000.00 while it was being approved "
        "at $120,000.00; nothing was approved. Approve it again; the board was told in vain; "
        "nothing to take back"
    )
    assert state_of(budget) == ("draft", "", 0, AMOUNT + 5000)
    assert events(maple) == [("conflict", 1)]

    again = approve(maple, actor="cron-b")  # tells the board the new amount, under a new key
    assert (again.outcome, again.token) == (Outcome.COMMITTED, 2)
    assert board.received[-1].idempotency_key.endswith(":2027:125000.00")
