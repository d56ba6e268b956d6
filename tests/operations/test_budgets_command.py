"""``manage.py approve_budget``: exit 0 / 75 / 1 through the answer table, one line, never a
traceback. Most cases run in this process; two child processes prove the real exit codes
(and that a child of the test run has the test-only app installed)."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from locking.models import FenceEvent
from tests.budgets.operations import budget_resource
from tests.budgets_support import AMOUNT, YEAR, state_of
from tests.harness.processes import run_manage

pytestmark = pytest.mark.django_db(transaction=True)

DRAFT = ("draft", "", 0, AMOUNT)
MAPLE = ("--org", "maple-court")


def call(*args: str) -> tuple[int, str]:
    """Run the command in this process: (exit status, its one line)."""
    out = StringIO()
    try:
        call_command("approve_budget", *args, stdout=out, stderr=StringIO())
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, out.getvalue().strip()


def test_approves_then_answers_already_approved_both_with_exit_0(budget, board):
    assert call(*MAPLE, "--year", "2027") == (
        0,
        "Approved the 2027 budget of Maple Court ($120,000.00).",
    )
    assert call(*MAPLE, "--year", "2027") == (
        0,
        "The 2027 budget of Maple Court was already approved ($120,000.00).",
    )
    status, approved_by, token, _amount = state_of(budget)
    assert (status, token) == ("approved", 2)
    assert approved_by.startswith("cli:")
    assert len(board.received) == 1


def test_a_busy_budget_exits_75_naming_the_holder(maple, budget, board, fence_lock):
    resource = budget_resource(maple, YEAR)
    with fence_lock.acquire(resource, ttl=timedelta(seconds=30), holder="bob"):
        status, line = call(*MAPLE, "--year", "2027")
    assert status == 75
    assert line.startswith("Another holder (bob on ")
    assert ") is approving the 2027 budget of Maple Court; try again in " in line
    assert line.endswith(" seconds.")  # operators read how long the lease has left
    assert state_of(budget) == DRAFT


@pytest.mark.parametrize(
    ("args", "answer"),
    [
        (("--year", "27"), '"27" is not a year: use four digits, e.g. 2027.'),
        (("--year", "2031"), "Maple Court has no budget for 2031 to approve."),
        (("--year", "2027", "--actor", "mallory"), 'No organization "maple-court" for mallory.'),
        (("--year", "2027", "--actor", "ghost"), 'No active user "ghost".'),
    ],
)
def test_bad_input_or_an_actor_not_allowed_exits_1(budget, board, mallory, args, answer):
    status, line = call(*MAPLE, *args)
    assert (status, line[: len(answer)]) == (1, answer)
    assert state_of(budget) == DRAFT and board.received == []


def test_an_unknown_organization_and_a_failed_notification_exit_1(budget, board):
    assert call("--org", "elm", "--year", "2027") == (1, 'Unknown organization "elm".')
    board.status = 422
    status, line = call(*MAPLE, "--year", "2027")
    assert (status, line) == (
        1,
        "Approving the 2027 budget of Maple Court failed: the board did not accept it "
        "(HTTP 422); nothing was saved.",
    )
    assert state_of(budget) == DRAFT
    assert list(FenceEvent.objects.values_list("outcome", flat=True)) == ["failed"]


def test_a_child_process_exits_0_then_75_while_another_holds_the_lease(
    subprocess_env, maple, budget, fence_lock
):
    done = run_manage("approve_budget", *MAPLE, "--year", YEAR, env=subprocess_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("Approved the 2027 budget of Maple Court ($120,000.00).")

    resource = budget_resource(maple, YEAR)
    with fence_lock.acquire(resource, ttl=timedelta(seconds=30), holder="bob"):
        busy = run_manage("approve_budget", *MAPLE, "--year", YEAR, env=subprocess_env)
    assert busy.returncode == 75
    assert "CommandError: Another holder (bob on " in busy.stderr
    assert ") is approving the 2027 budget of Maple Court; try again in " in busy.stderr
    assert "Traceback" not in busy.stderr
    status, approved_by, token, _amount = state_of(budget)
    assert (status, token) == ("approved", 1) and approved_by.startswith("cli:")
