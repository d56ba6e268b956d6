"""A fenced row whose ``last_fence_token`` is beyond anything its resource's record could
have granted (issue 44, item 4): it is named, never taken for a Redis counter that went
back, found by ``locking.E016`` and set back by ``manage.py locks repair``.

Before, ``Model.objects.update(last_fence_token=2**62)`` made the next ``run_fenced``
start an epoch above it: past ``MAX_EPOCH``, recorded for good, and every grant of the
resource answered "fence epochs exhausted" from then on.
"""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from locking import LockUnavailable, StaleFencingToken, advance_fence, run_fenced
from locking.audit import Attempt
from locking.checks import fenced_rows_are_within_their_records
from locking.documentation import DOCS_URL
from locking.epochs import FenceBeyondRecord, current_epoch, first_token, last_token
from locking.models import FenceEvent
from locking.tests.testapp.models import FencedThing

pytestmark = pytest.mark.django_db(transaction=True)

TTL = timedelta(seconds=30)
ALICE = Attempt(actor="alice")
CORRUPT = 2**62  # an adopter's update(), an old fixture


@pytest.fixture
def thing():
    return FencedThing.objects.create(name="gate")


@pytest.fixture
def resource(thing):
    return f"fenced-thing:{thing.pk}"


def rename(thing: FencedThing, name: str):
    def work(lease) -> int:
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), lease)
            FencedThing.objects.filter(pk=thing.pk).update(name=name)
        return lease.token

    return work


def on_row(thing: FencedThing) -> int:
    return FencedThing.objects.values_list("last_fence_token", flat=True).get(pk=thing.pk)


def locks(*args) -> list[str]:
    out = StringIO()
    call_command("locks", *args, stdout=out)
    return out.getvalue().splitlines()


def test_a_row_beyond_its_record_is_named_and_starts_no_epoch_and_a_repair_makes_it_usable(
    thing, resource
):
    assert run_fenced(resource, rename(thing, "first"), ttl=TTL, attempt=ALICE) == 1
    FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=CORRUPT)

    with pytest.raises(LockUnavailable) as refused:
        run_fenced(resource, rename(thing, "second"), ttl=TTL, attempt=ALICE)

    assert "exhausted" not in str(refused.value)
    assert isinstance(refused.value, FenceBeyondRecord)
    corrupt = refused.value
    assert (corrupt.resource, corrupt.recorded, corrupt.epoch, corrupt.row) == (
        resource,
        CORRUPT,
        0,
        f"locking_testapp.FencedThing pk {thing.pk}",
    )
    assert current_epoch(resource) == 0  # no epoch grew from the row's value
    assert on_row(thing) == CORRUPT and FencedThing.objects.get(pk=thing.pk).name == "first"
    [detail] = FenceEvent.objects.filter(outcome="unavailable").values_list("detail", flat=True)
    assert "locking.E016" in detail and str(CORRUPT) in detail

    # The check names the row, with the repair as its hint.
    [error] = fenced_rows_are_within_their_records(databases=["default"])
    assert error.id == "locking.E016" and error.obj is FencedThing
    assert f"pk {thing.pk} records fence token {CORRUPT}" in error.msg
    assert error.hint.startswith(
        f"manage.py locks repair RESOURCE --model locking_testapp.FencedThing --pk {thing.pk} "
        f"--token {CORRUPT} "
    )
    assert error.hint.endswith(
        "See 'Epochs: when Redis loses the counter', section 'A row beyond its record' "
        f"({DOCS_URL}epochs.html#a-row-beyond-its-record)."
    )

    lines = locks(
        "repair", resource, "--model", "locking_testapp.FencedThing", "--pk", str(thing.pk),
        "--token", str(CORRUPT), "--reason", "an old fixture",
    )  # fmt: skip

    assert lines == [
        f"Repaired locking_testapp.FencedThing pk {thing.pk} of {resource}: last_fence_token "
        f"{CORRUPT} -> {last_token(0)}, the last token of epoch 0."
    ]
    assert on_row(thing) == last_token(0)
    assert fenced_rows_are_within_their_records(databases=["default"]) == []
    repaired = FenceEvent.objects.get(operation="repair-fence")
    assert (repaired.resource, repaired.token, repaired.actor.startswith("cli:")) == (
        resource,
        last_token(0),
        True,
    )
    assert repaired.detail.endswith(": an old fixture")
    # The next attempt is refused once, as for a counter behind, and starts epoch 1.
    token = run_fenced(resource, rename(thing, "after the repair"), ttl=TTL, attempt=ALICE)
    assert token == on_row(thing) == first_token(1) + 1
    assert current_epoch(resource) == 1


def test_a_stale_refusal_naming_a_token_beyond_the_record_starts_no_epoch(thing, resource):
    """A caller's own refusal that quotes a row's value (``StaleFencingToken(lease.token,
    row.last_fence_token)``) is held to the record too."""
    run_fenced(resource, rename(thing, "first"), ttl=TTL, attempt=ALICE)

    def refused_by_the_caller(lease):
        raise StaleFencingToken(lease.token, CORRUPT)

    with pytest.raises(FenceBeyondRecord) as refused:
        run_fenced(resource, refused_by_the_caller, ttl=TTL, attempt=ALICE)

    assert (refused.value.recorded, refused.value.epoch, refused.value.row) == (CORRUPT, 0, "")
    assert current_epoch(resource) == 0


def test_the_repair_is_a_compare_and_set_and_repairs_only_a_row_beyond_its_record(thing, resource):
    run_fenced(resource, rename(thing, "first"), ttl=TTL, attempt=ALICE)
    FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=CORRUPT)
    args = ("repair", resource, "--model", "locking_testapp.FencedThing", "--pk", str(thing.pk))

    with pytest.raises(CommandError) as changed:
        locks(*args, "--token", str(CORRUPT - 1), "--reason", "seen wrong")
    assert changed.value.returncode == 75
    assert str(changed.value) == (
        f"locking_testapp.FencedThing pk {thing.pk} records token {CORRUPT} now, not "
        f"{CORRUPT - 1}: nothing repaired."
    )
    with pytest.raises(CommandError, match="nothing to repair") as within:
        locks(*args, "--token", str(last_token(0)), "--reason", "not corrupt")
    assert within.value.returncode == 1
    with pytest.raises(CommandError, match="--pk 'x': "):
        locks(*args[:-1], "x", "--token", str(CORRUPT), "--reason", "typo")
    with pytest.raises(CommandError, match="has no last_fence_token"):
        locks("repair", resource, "--model", "locking.FenceEvent", "--pk", "1", "--token", "1")

    assert on_row(thing) == CORRUPT
    assert not FenceEvent.objects.filter(operation="repair-fence").exists()
    # The guard is enabled again after a refused repair (its ALTER TABLE rolled back).
    FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=0)
    assert on_row(thing) == CORRUPT
