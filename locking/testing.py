"""Helpers for testing code that uses locking: leases with names of their own, a holder
paused past its lease, and a test client that posts sealed calls to a fenced receiver.

The pytest plugin (``locking.pytest_plugin``, installed with the wheel) hands them to tests
as fixtures: ``lease_factory``, ``paused_holder`` and ``receiver_client``. Without pytest
they are plain classes. They run against the real Redis and PostgreSQL of the test
settings; nothing is mocked. docs/locking/testing.md shows them in a test.
"""

import json
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TypeVar, cast
from urllib.parse import urlsplit

from django.db import connection
from django.http import HttpResponse
from django.test import Client
from django.urls import resolve

from locking.conf import setting
from locking.keys import FencingToken, LeaseOrToken, fencing_token_of, lock_key
from locking.lease import Lease
from locking.lock import FenceLock
from locking.receiving.receiver import CallVerdict, Receipt
from locking.receiving.signing import SealedCall, seal_call

__all__ = ["Delivery", "LeaseFactory", "PausedHolder", "ReceiverClient", "older_token"]

T = TypeVar("T")

# A lease of a test outlives any step of the test on a loaded machine; a test that needs it
# gone expires it (``PausedHolder``), never waits for it.
DEFAULT_TTL = timedelta(seconds=30)
# Seconds a paused holder's late work may take before the test fails instead of hanging.
RESUME_TIMEOUT = 60


class LeaseFactory:
    """Grants leases for a test and releases those still held when it ends (``close``).

    ``factory()`` grants on a resource of the test's own (``resource()``: a new name
    each time, unique across tests and workers that share a Redis); ``factory("invoice:7")``
    on the name the code under test uses. ``ttl`` defaults to 30 s.
    """

    def __init__(self, lock: FenceLock | None = None, *, prefix: str = "test"):
        self.lock = lock if lock is not None else FenceLock()
        self.prefix = f"{prefix}:{uuid.uuid4().hex[:12]}"
        self.granted: list[Lease] = []
        self._numbered = 0

    def resource(self) -> str:
        """A resource name no other test uses."""
        self._numbered += 1
        return f"{self.prefix}:{self._numbered}"

    def __call__(
        self, resource: str | None = None, *, ttl: timedelta = DEFAULT_TTL, holder: str = ""
    ) -> Lease:
        """Grant a lease on ``resource`` (a new name of the test's own when ``None``), or
        raise ``LockHeld`` as ``FenceLock.acquire`` does."""
        lease = self.lock.acquire(resource or self.resource(), ttl=ttl, holder=holder)
        self.granted.append(lease)
        return lease

    def paused(
        self, resource: str | None = None, *, ttl: timedelta = DEFAULT_TTL, holder: str = "paused"
    ) -> "PausedHolder":
        """Grant a lease as ``factory()`` does, to a holder then paused past it."""
        return PausedHolder(self(resource, ttl=ttl, holder=holder))

    def close(self) -> None:
        """Release every lease granted here that is still held (the test's teardown)."""
        for lease in self.granted:
            if not lease.state.is_over:
                lease.release()


class PausedHolder:
    """A holder that took a lease and was paused past it: the lease ran out, its holder did
    not notice, and wakes to finish its work with it (``resume``).

    The lease runs out at once and deterministically: its key is expired in Redis
    (``PEXPIRE 0``), which is what Redis holds when a TTL runs out, so the next
    ``acquire`` is granted a newer token without the test sleeping. The holder's own clock
    did not move: its ``lease.state`` is still ``HELD`` and ``lease.check()`` passes, as
    for a process stopped between its last check and its write (a GC pause, ``SIGSTOP``,
    a slow call). Only the fence can refuse it, which is what a test of the fence shows.
    """

    def __init__(self, lease: Lease):
        self.lease = lease
        self.expire()

    @property
    def token(self) -> int:
        """The fencing token of the paused grant."""
        return self.lease.token

    def expire(self) -> None:
        """Expire the lease's key in Redis now, as its TTL running out would (done when the
        holder is made). Whoever holds the key then loses it: call it before a newer grant."""
        self.lease._lock.client.pexpire(lock_key(self.lease.resource), 0)

    def resume(self, work: Callable[[Lease], T], *, timeout: float = RESUME_TIMEOUT) -> T:
        """Wake the holder: run ``work(lease)`` in a thread of its own, with a database
        connection of its own (closed after), and return what it returned or raise what
        it raised.

        The holder's writes are another connection's, as a paused worker's are: a test
        whose work writes rows it created needs ``django_db(transaction=True)`` (pytest-
        django), or the holder cannot see them.
        """
        outcome: list[T] = []
        errors: list[BaseException] = []

        def wake() -> None:
            try:
                outcome.append(work(self.lease))
            except BaseException as error:  # raised again in the test's thread
                errors.append(error)
            finally:
                connection.close()

        thread = threading.Thread(target=wake, name=f"paused holder {self.lease.token}")
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise AssertionError(f"the paused holder's work did not end within {timeout} s")
        if errors:
            raise errors[0]
        return outcome[0]


@dataclass(frozen=True)
class Delivery:
    """One sealed call posted to a receiver, and what the receiver answered.

    ``receipt`` is the receiver's decision when the view is a ``fenced_receiver`` (``None``
    for a view that calls ``receive_call`` itself: read ``status`` and ``answer`` then).
    """

    url: str
    payload: Mapping[str, object]
    token: FencingToken
    idempotency_key: str
    endpoint: str
    sealed: SealedCall
    response: HttpResponse = field(repr=False)
    receipt: Receipt | None

    @property
    def status(self) -> int:
        return self.response.status_code

    @property
    def verdict(self) -> CallVerdict | None:
        """``accepted``, ``replaced``, ``replayed``, ``stale``, ``conflict``, ``unverified``
        or ``declined`` (``None`` without a receipt)."""
        return self.receipt.verdict if self.receipt is not None else None

    @property
    def accepted(self) -> int | None:
        """The token the key's record holds after the call (``None`` without a receipt)."""
        return self.receipt.accepted if self.receipt is not None else None

    @property
    def answer(self) -> dict[str, object]:
        """The answer's JSON object (a refusal's facts: ``refused``, ``token``,
        ``accepted``); empty when the answer is not one."""
        try:
            answer = json.loads(self.response.content)
        except ValueError:
            return {}
        return cast(dict[str, object], answer) if isinstance(answer, dict) else {}


class ReceiverClient:
    """Posts sealed calls (``seal_call``) to fenced receivers through Django's test client.

    ``secret`` signs them (default: ``LOCK_RECEIVER_SECRET`` when a call is posted); pass
    the receiver's own when its ``fenced_receiver`` was given one. The ``endpoint`` a call
    is sealed for defaults to the scope of the ``fenced_receiver`` view at its URL.
    """

    def __init__(self, client: Client | None = None, *, secret: str | None = None):
        self.client = client if client is not None else Client()
        self.secret = secret

    def post(
        self,
        url: str,
        payload: Mapping[str, object],
        *,
        token: LeaseOrToken,
        idempotency_key: str,
        endpoint: str | None = None,
        secret: str | None = None,
    ) -> Delivery:
        """Seal ``payload`` under ``token`` (a lease, or its ``fencing_token``), post it to
        ``url`` and return the delivery."""
        fencing = fencing_token_of(token, taken_by="ReceiverClient.post")
        endpoint = endpoint or self.scope_of(url)
        if secret is None:
            secret = self.secret if self.secret is not None else setting("LOCK_RECEIVER_SECRET")
        sealed = seal_call(
            payload,
            idempotency_key=idempotency_key,
            token=fencing,
            secret=secret,
            endpoint=endpoint,
        )
        response = self.client.post(
            url,
            data=sealed.body,
            content_type=sealed.headers["Content-Type"],
            headers={
                name: value for name, value in sealed.headers.items() if name != "Content-Type"
            },
        )
        receipt = getattr(response.wsgi_request, "fenced_receipt", None)
        return Delivery(
            url=url,
            payload=payload,
            token=fencing,
            idempotency_key=idempotency_key,
            endpoint=endpoint,
            sealed=sealed,
            response=response,
            receipt=receipt if isinstance(receipt, Receipt) else None,
        )

    def replay(
        self,
        delivery: Delivery,
        *,
        token: LeaseOrToken | None = None,
        payload: Mapping[str, object] | None = None,
    ) -> Delivery:
        """Post ``delivery``'s call again, signed anew: the same call (a resend, answered
        ``replayed``), or under another ``token`` or with another ``payload``."""
        return self.post(
            delivery.url,
            delivery.payload if payload is None else payload,
            token=delivery.token if token is None else token,
            idempotency_key=delivery.idempotency_key,
            endpoint=delivery.endpoint,
        )

    def replay_older(
        self, delivery: Delivery, *, by: int = 1, payload: Mapping[str, object] | None = None
    ) -> Delivery:
        """Post ``delivery``'s call again under a token ``by`` lower on the same resource:
        the late call of a holder granted before it (a receiver answers ``stale``, 409)."""
        return self.replay(delivery, token=older_token(delivery.token, by=by), payload=payload)

    @staticmethod
    def scope_of(url: str) -> str:
        """The scope of the ``fenced_receiver`` view at ``url`` (``ValueError`` if none)."""
        view = resolve(urlsplit(url).path).func
        scope = getattr(view, "fenced_receiver_scope", None)
        if not isinstance(scope, str):
            raise ValueError(f"{url} is no fenced_receiver view: pass endpoint=")
        return scope


def older_token(token: FencingToken, *, by: int = 1) -> FencingToken:
    """A grant on ``token``'s resource ``by`` tokens before it (another grant: its own owner)."""
    return replace(token, token=token.token - by, owner=f"{token.owner}-older-{by}")
