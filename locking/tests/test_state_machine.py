"""Property-based model of the fence lock: several clients acquire, release, extend and lose
leases (forced expiry with ``PEXPIRE key 0`` on the real key) in any order hypothesis finds.

After every step the real Redis must agree with a simple model: at most one owner per
resource and it is the one the model expects, tokens only grow, and release/extend answer
truthfully whether the lease was still ours.
"""

import itertools
from datetime import timedelta

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from locking import FenceLock, LockHeld
from locking.conf import setting
from locking.keys import fence_key, lock_key
from locking.tests.fixtures import forget_fence_epochs

# Every grant may record a fence epoch in the database (locking/epochs.py).
pytestmark = pytest.mark.django_db

RESOURCES = ("vendor-assignment:complaint:1", "vendor-assignment:complaint:2")
CLIENTS = 3
TTL = timedelta(seconds=60)  # never expires on its own during a run: expiry is forced


class LeaseMachine(RuleBasedStateMachine):
    grants = Bundle("grants")  # (client number, Lease) of every lease ever granted

    def __init__(self):
        super().__init__()
        url = setting("LOCK_REDIS_URL")
        self.redis = redis.Redis.from_url(url)
        self.redis.delete(*(lock_key(r) for r in RESOURCES), *(fence_key(r) for r in RESOURCES))
        forget_fence_epochs()  # each example starts from resources never granted
        # Each client has its own connection, as separate workers would.
        self.clients = [FenceLock(client=redis.Redis.from_url(url)) for _ in range(CLIENTS)]
        self.owner = dict.fromkeys(RESOURCES)  # the (client, Lease) the model says holds r
        self.tokens: dict[str, list[int]] = {r: [] for r in RESOURCES}

    def teardown(self):
        self.redis.close()
        for lock in self.clients:
            lock.client.close()

    def is_owner(self, lease) -> bool:
        current = self.owner[lease.resource]
        return current is not None and current[1].owner == lease.owner

    def last_token(self, resource: str) -> int:
        return self.tokens[resource][-1] if self.tokens[resource] else 0

    @rule(target=grants, client=st.integers(0, CLIENTS - 1), resource=st.sampled_from(RESOURCES))
    def acquire(self, client, resource):
        try:
            lease = self.clients[client].acquire(resource, ttl=TTL, holder=f"client-{client}")
        except LockHeld as busy:
            assert self.owner[resource] is not None, "refused although nobody holds it"
            holder_client, _ = self.owner[resource]
            assert f"client-{holder_client} on " in busy.holder
            assert busy.retry_after > timedelta(0)
            assert busy.token == self.last_token(resource)
            return multiple()
        assert self.owner[resource] is None, "granted while another lease is live"
        assert lease.token == self.last_token(resource) + 1
        self.tokens[resource].append(lease.token)
        self.owner[resource] = (client, lease)
        return (client, lease)

    @rule(grant=grants)
    def release(self, grant):
        _, lease = grant
        ours = self.is_owner(lease)
        assert lease.release() is ours
        if ours:
            self.owner[lease.resource] = None

    @rule(grant=grants, seconds=st.sampled_from([30, 60, 90]))
    def extend(self, grant, seconds):
        _, lease = grant
        ours = self.is_owner(lease)
        assert lease.extend(timedelta(seconds=seconds)) is ours
        if ours:
            assert self.redis.pttl(lock_key(lease.resource)) > (seconds - 5) * 1000
        else:
            assert lease.lost.is_set()

    @rule(resource=st.sampled_from(RESOURCES))
    def expire(self, resource):
        """The holder paused past its TTL: Redis drops the lease."""
        self.redis.pexpire(lock_key(resource), 0)
        self.owner[resource] = None

    @invariant()
    def redis_agrees_with_the_model(self):
        for resource in RESOURCES:
            stored = self.redis.get(lock_key(resource))
            if self.owner[resource] is None:
                assert stored is None
            else:
                _, lease = self.owner[resource]
                assert stored is not None and stored.decode().startswith(lease.owner + "|")
                assert lease.probably_valid

    @invariant()
    def tokens_only_grow(self):
        for resource in RESOURCES:
            tokens = self.tokens[resource]
            assert all(a < b for a, b in itertools.pairwise(tokens))
            counter = self.redis.get(fence_key(resource))
            assert (int(counter) if counter is not None else 0) == self.last_token(resource)


@pytest.mark.slow
def test_leases_of_several_clients_match_the_model_after_every_step():
    run_state_machine_as_test(
        LeaseMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            database=None,  # keep no example database in the working tree
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
