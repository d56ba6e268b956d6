"""What an operator reads of a held lease (``holders``, ``holder_of``): its holder, token,
time left as people read it ("59 s", "4 min 3 s", never "0:00:59.987000") and its state."""

import re
from datetime import timedelta

import pytest

from locking.keys import holder_label, lock_key
from locking.operators import HolderState, duration_text, holder_of, holders


@pytest.mark.parametrize(
    ("span", "text"),
    [
        (timedelta(seconds=59.987), "59 s"),
        (timedelta(minutes=4, seconds=3, milliseconds=999), "4 min 3 s"),
        (timedelta(minutes=4), "4 min 0 s"),
        (timedelta(hours=2, minutes=5, seconds=9), "2 h 5 min"),
        (timedelta(days=3, hours=4, minutes=1), "3 d 4 h"),
        (timedelta(milliseconds=300), "under 1 s"),
        (timedelta(0), "0 s"),
    ],
)
def test_time_reads_as_people_read_it(span, text):
    assert duration_text(span) == text


@pytest.mark.django_db  # a first grant records its epoch
def test_a_held_lease_shows_its_holder_token_time_left_and_state(fence_lock):
    lease = fence_lock.acquire("job:1", ttl=timedelta(minutes=4, seconds=4), holder="w-1")

    [holder] = holders()

    assert (holder.resource, holder.owner, holder.label, holder.token) == (
        "job:1",
        lease.owner,
        holder_label("w-1"),
        lease.token,
    )
    assert holder.state == HolderState.HELD
    assert re.fullmatch(r"[34] min [0-9]{1,2} s", holder.expires_in), holder.expires_in
    assert re.fullmatch(r"under 1 s|[0-9]{1,2} s", holder.held_for), holder.held_for


def test_a_lock_key_without_a_ttl_is_a_lease_that_never_expires(redis_client):
    """Not written so by locking (a restore, a SET by hand): nothing but a break ends it."""
    redis_client.set(lock_key("job:2"), "f00d|1700000000000|restored")

    holder = holder_of("job:2")

    assert (holder.owner, holder.label, holder.token) == ("f00d", "restored", None)
    assert (holder.state, holder.state.label, holder.expires_in) == (
        HolderState.NO_EXPIRY,
        "never expires",
        "never",
    )
    assert holder.held_for.endswith(" h") or holder.held_for.endswith(" min")  # since 2023


@pytest.mark.django_db
def test_nobody_holds_a_released_lease(fence_lock):
    fence_lock.acquire("job:3", ttl=timedelta(seconds=30)).release()
    assert holder_of("job:3") is None and holders() == []
