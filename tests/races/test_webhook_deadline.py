"""EXTERNAL_CALL_TIMEOUT_SECONDS is the deadline of the platform's calls, for the whole call.

Issue 35, point 12: with a lease TTL of 2 s and a timeout of 1 s (which check ``hoa.W001``
accepts), a billing endpoint that trickled its answer a byte at a time kept the call open
for 3 s: every read returned within the timeout, the call did not. A real socket server
trickles here; the client must give up at the deadline, and close the connection, while
its lease still runs.

The deadline itself is locking's sender's (``locking.post_fenced``), proven for every way
an answer's connection is framed (keep-alive, ``Connection: close``, ``HTTP/1.0``, chunked,
a body that ends with the stream, a reused connection, TLS) by locking/tests/test_sender.py;
here, that the platform's calls take their deadline from the setting and end inside the
lease.
"""

import socket
import threading
import time

import pytest
from django.core import checks

from charges.services import generate_monthly_charges
from hoa.answers.refusals import OutcomeUnknown
from hoa.integrations.webhooks import ExternalCallUnknown, post_fenced
from locking import FencingToken
from tests.charges_support import MONTH

TRICKLE_SECONDS = 3.0  # how long the server would take to answer in full
BYTE_EVERY = 0.1
# How long after the deadline a call may still end: the watchdog's thread, the unwinding
# of urllib3 and a loaded machine. A correctness bound (the answer takes 3 s), not speed.
LATE_BY_AT_MOST = 1.0

OK_HEADERS = b"Content-Type: application/json\r\n"


def _bytes(data: bytes) -> list[bytes]:
    return [bytes([byte]) for byte in data]


def _trickled_head() -> list[bytes]:
    """Issue 35's answer: the headers themselves trickle (a long one), then a short body."""
    body = b'{"ok": true}'
    padding = b"X-Slow: " + b"." * int(TRICKLE_SECONDS / BYTE_EVERY) + b"\r\n"
    return _bytes(
        b"HTTP/1.1 200 OK\r\n"
        + OK_HEADERS
        + padding
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


class TricklingServer(threading.Thread):
    """Accepts one connection, reads the request, then sends
    ``answer`` one piece every ``BYTE_EVERY`` seconds; records whether the client hung up
    before the end."""

    def __init__(self, answer: list[bytes]):
        super().__init__(daemon=True)
        self.answer = answer
        self.requests = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.client_hung_up = threading.Event()
        self.finished_answer = threading.Event()
        self.connected = threading.Event()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def run(self):
        connection, _ = self.listener.accept()
        self.connected.set()
        connection.settimeout(10)
        with connection:
            self._read_request(connection, b"")
            try:
                for piece in self.answer:
                    connection.sendall(piece)
                    time.sleep(BYTE_EVERY)
            except OSError:  # reset or broken pipe: the client closed the call
                self.client_hung_up.set()
                return
            # Sent in full: did the client still read it, or had it shut the socket?
            try:
                connection.settimeout(1)
                if connection.recv(1) == b"":
                    self.client_hung_up.set()
            except OSError:
                self.client_hung_up.set()
            self.finished_answer.set()

    def _read_request(self, connection, unread: bytes) -> bytes:
        """Read one request, its body included; return what came after it."""
        while b"\r\n\r\n" not in unread:
            unread += connection.recv(65536)
        head, _, unread = unread.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(unread) < length:
            unread += connection.recv(65536)
        self.requests += 1
        return unread[length:]

    def stop(self):
        self.listener.close()
        self.join(TRICKLE_SECONDS + 5)


@pytest.fixture
def serve():
    """Start a ``TricklingServer`` (stopped after the test)."""
    servers = []

    def start(answer: list[bytes], **options) -> TricklingServer:
        server = TricklingServer(answer, **options)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def trickling(serve):
    return serve(_trickled_head())


def test_a_trickled_answer_fails_at_the_deadline_and_the_connection_is_closed(settings, trickling):
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 1
    token = FencingToken("monthly-charges:org:1:2026-03", 5, "grant-5")

    started = time.monotonic()
    with pytest.raises(ExternalCallUnknown, match="timed out"):
        post_fenced(
            trickling.url("billing"),
            {"total": "10.00"},
            idempotency_key="monthly-charges:1:2026-03",
            token=token,
            endpoint="billing",
        )

    assert time.monotonic() - started < 1 + LATE_BY_AT_MOST
    # Hung up on, not answered in full: the call ended at the deadline, the server's side.
    assert trickling.client_hung_up.wait(TRICKLE_SECONDS + 2)
    assert not trickling.finished_answer.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_billing_call_ends_before_the_lease_the_check_accepts(settings, trickling, maple, alice):
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 1
    settings.CHARGES_LOCK_TTL_SECONDS = 2
    settings.BILLING_WEBHOOK_URL = trickling.url("billing")
    assert not [m for m in checks.run_checks() if m.id == "hoa.W001"]  # 1 s of 2 s: accepted
    leases = []

    def watch(lease):
        leases.append(lease)

    from charges import billing

    sent = billing.send_charge_run

    def send_and_watch(**kwargs):
        watch(kwargs["token"])
        try:
            return sent(**kwargs)
        finally:
            leases.append(kwargs["token"].state)  # the lease's state as the call ended

    billing.send_charge_run = send_and_watch
    try:
        with pytest.raises(OutcomeUnknown) as failed:
            generate_monthly_charges(organization=maple, month=MONTH, actor=alice)
    finally:
        billing.send_charge_run = sent

    assert failed.value.reason == "timed out"
    _lease, state_when_the_call_ended = leases
    assert state_when_the_call_ended == "held"  # the call ended inside the lease
    assert trickling.client_hung_up.wait(TRICKLE_SECONDS + 2)
    assert not trickling.finished_answer.is_set()
