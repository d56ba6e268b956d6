"""EXTERNAL_CALL_TIMEOUT_SECONDS is a deadline for the whole call, not for each read.

Issue 35, point 12: with a lease TTL of 2 s and a timeout of 1 s (which check ``hoa.W001``
accepts), a billing endpoint that trickled its answer a byte at a time kept the call open
for 3 s: every read returned within the timeout, the call did not. A real socket server
trickles here; the client must give up at the deadline, and close the connection, while
its lease still runs.

Issue 44: the deadline held only while the connection kept its socket. An answer whose
headers say the connection will close (``HTTP/1.0``, ``Connection: close``, a body that
ends with the stream) hands the socket to the response, and its trickled body ran 3.1 s
past a 1 s deadline. One test per kind of connection, each trickling its body past the
deadline: the call ends at the deadline, timed out.
"""

import shutil
import socket
import ssl
import subprocess
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
DEADLINE_SECONDS = 1
# How long after the deadline a call may still end: the watchdog's thread, the unwinding
# of requests and a loaded machine. A correctness bound (the answer takes 3 s), not speed.
LATE_BY_AT_MOST = 1.0

OK_HEADERS = b"Content-Type: application/json\r\n"
# A body of valid JSON that takes TRICKLE_SECONDS to send a byte at a time.
SLOW_BODY = b'{"padding": "' + b"." * int(TRICKLE_SECONDS / BYTE_EVERY) + b'"}'


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


def _sized(status_line: bytes, *headers: bytes) -> list[bytes]:
    """The head at once, then SLOW_BODY a byte at a time, its length given up front."""
    head = status_line + OK_HEADERS + b"".join(headers)
    head += f"Content-Length: {len(SLOW_BODY)}\r\n\r\n".encode()
    return [head, *_bytes(SLOW_BODY)]


class TricklingServer(threading.Thread):
    """Accepts one connection (over TLS with ``tls``), reads the request, then sends
    ``answer`` one piece every ``BYTE_EVERY`` seconds; records whether the client hung up
    before the end."""

    def __init__(
        self, answer: list[bytes], *, tls: ssl.SSLContext | None = None, first: bytes = b""
    ):
        super().__init__(daemon=True)
        self.answer = answer
        self.tls = tls
        self.first = first  # answered at once to a first request, on the same connection
        self.requests = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.client_hung_up = threading.Event()
        self.finished_answer = threading.Event()
        self.connected = threading.Event()

    def url(self, path: str) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/{path}"

    def run(self):
        connection, _ = self.listener.accept()
        self.connected.set()
        connection.settimeout(10)
        if self.tls:
            connection = self.tls.wrap_socket(connection, server_side=True)
        with connection:
            unread = self._read_request(connection, b"")
            if self.first:
                connection.sendall(self.first)
                self._read_request(connection, unread)
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


@pytest.fixture
def tls_server_context(tmp_path, monkeypatch) -> ssl.SSLContext:
    """A TLS context for 127.0.0.1 with a self-signed certificate made here, which the
    client trusts as it would in production: through ``REQUESTS_CA_BUNDLE``."""
    assert shutil.which("openssl"), "the TLS test makes its certificate with openssl"
    certificate, key = tmp_path / "receiver.pem", tmp_path / "receiver.key"
    make = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1"
    subprocess.run(
        [
            *make.split(),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(certificate)),
        ],
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(certificate))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    return context


def _call(server: TricklingServer):
    token = FencingToken("monthly-charges:org:1:2026-03", 5, "grant-5")
    return post_fenced(
        server.url("billing"),
        {"total": "10.00"},
        idempotency_key="monthly-charges:1:2026-03",
        token=token,
        endpoint="billing",
    )


def _call_within_the_deadline(settings, server: TricklingServer) -> None:
    """POST to ``server`` with a deadline of ``DEADLINE_SECONDS``; assert the call ended
    as timed out at the deadline (its outcome unknown: the server had the request), and
    hung up on the server before its answer's end."""
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = DEADLINE_SECONDS
    started = time.monotonic()
    with pytest.raises(ExternalCallUnknown) as failed:
        _call(server)
    took = time.monotonic() - started

    assert failed.value.reason == "timed out"
    assert took < DEADLINE_SECONDS + LATE_BY_AT_MOST, f"the call took {took:.1f} s"
    assert server.client_hung_up.wait(TRICKLE_SECONDS + 2)
    assert not server.finished_answer.is_set()


def test_a_keep_alive_answer_trickled_past_the_deadline_fails_at_it(settings, serve):
    server = serve(_sized(b"HTTP/1.1 200 OK\r\n"))

    _call_within_the_deadline(settings, server)


def test_a_connection_close_answer_trickled_past_the_deadline_fails_at_it(settings, serve):
    server = serve(_sized(b"HTTP/1.1 200 OK\r\n", b"Connection: close\r\n"))

    _call_within_the_deadline(settings, server)


def test_an_http_1_0_answer_trickled_past_the_deadline_fails_at_it(settings, serve):
    server = serve(_sized(b"HTTP/1.0 200 OK\r\n"))

    _call_within_the_deadline(settings, server)


def test_a_chunked_answer_trickled_past_the_deadline_fails_at_it(settings, serve):
    head = b"HTTP/1.1 200 OK\r\n" + OK_HEADERS + b"Transfer-Encoding: chunked\r\n\r\n"
    chunks = [b"1\r\n" + byte + b"\r\n" for byte in _bytes(SLOW_BODY)]
    server = serve([head, *chunks, b"0\r\n\r\n"])

    _call_within_the_deadline(settings, server)


def test_an_answer_ending_with_the_stream_trickled_past_the_deadline_fails_at_it(settings, serve):
    # Neither a length nor chunks: the body ends when the server closes.
    server = serve([b"HTTP/1.1 200 OK\r\n" + OK_HEADERS + b"\r\n", *_bytes(SLOW_BODY)])

    _call_within_the_deadline(settings, server)


def test_a_kept_alive_connection_reused_for_a_trickled_answer_fails_at_the_deadline(
    settings, serve
):
    # The first call is answered at once, and its connection goes back to the pool; the
    # second call takes it from there, already connected, and is trickled to.
    answered = b"HTTP/1.1 200 OK\r\n" + OK_HEADERS + b'Content-Length: 12\r\n\r\n{"ok": true}'
    server = serve(_sized(b"HTTP/1.1 200 OK\r\n"), first=answered)
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = DEADLINE_SECONDS
    assert _call(server).status == 200

    _call_within_the_deadline(settings, server)
    assert server.requests == 2  # both calls on the one connection the server accepts


def test_a_tls_answer_trickled_past_the_deadline_fails_at_it(settings, serve, tls_server_context):
    # Connection: close, so the TLS socket is the response's, as in the HTTP/1.0 case.
    answer = _sized(b"HTTP/1.1 200 OK\r\n", b"Connection: close\r\n")
    server = serve(answer, tls=tls_server_context)

    _call_within_the_deadline(settings, server)


def test_a_trickled_answer_fails_at_the_deadline_and_the_connection_is_closed(settings, trickling):
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 1
    token = FencingToken("monthly-charges:org:1:2026-03", 5, "grant-5")

    with pytest.raises(ExternalCallUnknown, match="timed out"):
        post_fenced(
            trickling.url("billing"),
            {"total": "10.00"},
            idempotency_key="monthly-charges:1:2026-03",
            token=token,
            endpoint="billing",
        )

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
