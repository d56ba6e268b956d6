"""``post_fenced``: one sealed POST, and which of done, refused or unknown it came to.

Every answer comes from a real socket server (``sender_server.ScriptedServer``) that answers
as each test scripts it: whole, refused, redirected, failed, cut off, never, or a byte at a
time past the deadline. The deadline is the whole call's (issue 35, point 12; issue 44): a
receiver that trickles its answer cannot keep the call open past it, however the answer's
connection is framed.
"""

import json
import shutil
import socket
import ssl
import subprocess
import time
from datetime import timedelta

import pytest

from locking import FencingToken, LockError, Outcome, post_fenced
from locking.receiving import StaleAtReceiver
from locking.receiving.signing import open_call, seal_answer
from locking.sending import CallAnswer, CallOutcomeUnknown, CallRefused, _proxy_for
from locking.tests.sender_server import CLOSE, Request, ScriptedServer, answer

SECRET = "sender-tests-secret"
KEY = "bill:2026-03"
GRANT = FencingToken("fenced-thing:sender", 5, "grant-5")
DEADLINE = 1.0
# How long after the deadline a call may still end: the watchdog's thread, the unwinding
# of urllib3 and a loaded machine. A correctness bound (the answers take 3 s), not speed.
LATE_BY_AT_MOST = 1.0
TRICKLE_SECONDS = 3.0
EVERY = 0.1
OK_HEADERS = b"Content-Type: application/json\r\n"
# A body of valid JSON that takes TRICKLE_SECONDS to send a byte at a time.
SLOW_BODY = b'{"padding": "' + b"." * int(TRICKLE_SECONDS / EVERY) + b'"}'


@pytest.fixture
def serve():
    """Start a ``ScriptedServer`` (stopped after the test)."""
    servers = []

    def start(*answers, **options) -> ScriptedServer:
        server = ScriptedServer(list(answers), **options)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def send(url: str, *, timeout: float = 5.0, secret: str = SECRET, lease=GRANT) -> CallAnswer:
    return post_fenced(
        url,
        {"total": "10.00"},
        lease=lease,
        idempotency_key=KEY,
        endpoint="billing",
        secret=secret,
        timeout=timeout,
    )


def _bytes(data: bytes) -> list[bytes]:
    return [bytes([byte]) for byte in data]


# -- done and refused --------------------------------------------------------------------


def test_a_2xx_answer_read_in_full_is_done_and_the_call_was_sealed(serve):
    server = serve(answer("201 Created", b'{"reference": "PAY-1"}'))

    done = send(server.url())

    assert (done.status, json.loads(done.content)) == (201, {"reference": "PAY-1"})
    (request,) = server.requests
    assert (request.method, request.target) == ("POST", "/hook")
    call = open_call(request.headers, request.body, secret=SECRET, endpoint="billing")
    assert call is not None, "the call did not verify as sealed for billing"
    assert (call.idempotency_key, call.token, call.payload) == (KEY, 5, {"total": "10.00"})


@pytest.mark.parametrize("status", ["400 Bad Request", "401 Unauthorized", "422 Unprocessable"])
def test_a_4xx_answer_is_refused(serve, status):
    server = serve(answer(status))

    with pytest.raises(CallRefused) as refused:
        send(server.url())

    code = int(status.split()[0])
    assert (refused.value.status, refused.value.reason) == (code, f"HTTP {code}")
    assert (refused.value.idempotency_key, refused.value.endpoint) == (KEY, "billing")
    assert isinstance(refused.value, LockError)
    assert refused.value.outcome == Outcome.FAILED


def test_a_connection_never_made_is_refused_nothing_was_sent():
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]  # nobody listens there once it is closed

    with pytest.raises(CallRefused) as refused:
        send(f"http://127.0.0.1:{port}/hook")

    assert (refused.value.status, refused.value.reason) == (None, "could not connect")


def test_a_url_that_cannot_be_called_is_refused():
    with pytest.raises(CallRefused, match="not a URL that can be called"):
        send("ftp://billing.example/hook")


def test_a_bare_token_number_is_refused_before_anything_is_sent(serve):
    server = serve(answer("200 OK"))

    with pytest.raises(TypeError, match="takes the lease"):
        send(server.url(), lease=5)

    assert server.requests == []


# -- stale -------------------------------------------------------------------------------


def _signed_409(*, accepted: int, secret: str = SECRET, key: str | None = None):
    """The answer of a fenced receiver that had accepted ``accepted`` for the call's key:
    signed with ``secret``, naming the call (or, with ``key``, another one)."""

    def script(request: Request) -> list[bytes]:
        call = open_call(request.headers, request.body, secret=SECRET, endpoint="billing")
        if key is not None:
            call = call.__class__(**{**call.__dict__, "idempotency_key": key})
        facts = {"refused": "stale", "token": call.token, "accepted": accepted}
        sealed = seal_answer(facts, call=call, secret=secret)
        headers = [f"{name}: {value}" for name, value in sealed.headers.items()]
        return answer("409 Conflict", sealed.body, *headers[1:])(request)

    return script


def test_a_signed_409_naming_the_call_is_stale_with_the_token_it_accepted(serve):
    server = serve(_signed_409(accepted=9))

    with pytest.raises(StaleAtReceiver) as stale:
        send(server.url())

    assert (stale.value.token, stale.value.accepted, stale.value.url) == (5, 9, server.url())
    assert stale.value.outcome == Outcome.STALE


@pytest.mark.parametrize(
    "script",
    [
        answer("409 Conflict", b'{"refused": "stale", "token": 5, "accepted": 9}'),
        _signed_409(accepted=9, secret="someone-else's"),
        _signed_409(accepted=9, key="bill:2026-04"),
    ],
    ids=["unsigned", "signed-with-another-secret", "naming-another-call"],
)
def test_a_409_that_is_no_signed_answer_to_this_call_is_a_refusal_not_stale(serve, script):
    """Anyone on the path can answer 409: only the receiver's own, signed answer to this
    call says a newer holder was there first."""
    server = serve(script)

    with pytest.raises(CallRefused) as refused:
        send(server.url())

    assert not isinstance(refused.value, StaleAtReceiver)
    assert (refused.value.status, refused.value.reason) == (409, "HTTP 409")


# -- unknown -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["500 Internal Server Error", "503 Service Unavailable"])
def test_a_5xx_answer_is_unknown(serve, status):
    server = serve(answer(status))

    with pytest.raises(CallOutcomeUnknown) as unknown:
        send(server.url())

    code = int(status.split()[0])
    assert (unknown.value.status, unknown.value.reason) == (code, f"HTTP {code}")
    assert (unknown.value.idempotency_key, unknown.value.endpoint) == (KEY, "billing")
    assert not isinstance(unknown.value, CallRefused)
    assert unknown.value.outcome == Outcome.UNKNOWN


def test_a_redirect_is_unknown_and_never_followed(serve):
    server = serve(answer("302 Found", b"", "Location: /moved"), answer("200 OK"))

    with pytest.raises(CallOutcomeUnknown) as unknown:
        send(server.url())

    assert (unknown.value.status, unknown.value.reason) == (
        302,
        "HTTP 302: redirected, not followed",
    )
    time.sleep(0.3)  # a followed redirect would be on its way
    assert [request.target for request in server.requests] == ["/hook"]


def test_a_connection_closed_before_the_answer_is_unknown(serve):
    server = serve(lambda request: [CLOSE])

    with pytest.raises(CallOutcomeUnknown) as unknown:
        send(server.url())

    assert unknown.value.reason == "the connection was lost before the answer"
    assert len(server.requests) == 1  # it had the call


def test_an_answer_cut_off_is_unknown(serve):
    body = b'{"reference": "PAY-1"}'
    head = b"HTTP/1.1 200 OK\r\n" + OK_HEADERS + f"Content-Length: {len(body)}\r\n\r\n".encode()
    server = serve(lambda request: [head + body[:10], CLOSE])

    with pytest.raises(CallOutcomeUnknown) as unknown:
        send(server.url())

    assert unknown.value.reason == "the answer was cut off"


def test_no_answer_within_the_deadline_is_unknown(serve):
    server = serve(lambda request: [_silence()])

    started = time.monotonic()
    with pytest.raises(CallOutcomeUnknown) as unknown:
        send(server.url(), timeout=DEADLINE)

    assert unknown.value.reason == "timed out"
    assert time.monotonic() - started < DEADLINE + LATE_BY_AT_MOST


def _silence() -> bytes:
    """Say nothing for longer than any deadline here, then a byte the client never reads."""
    time.sleep(DEADLINE + LATE_BY_AT_MOST + 1)
    return b"H"


# -- the deadline: a trickled answer, however it is framed ------------------------------


def _trickled_head(request: Request) -> list[bytes]:
    """Issue 35's answer: the head itself trickles (a long header), then a short body."""
    body = b'{"ok": true}'
    padding = b"X-Slow: " + b"." * int(TRICKLE_SECONDS / EVERY) + b"\r\n"
    return _bytes(
        b"HTTP/1.1 200 OK\r\n"
        + OK_HEADERS
        + padding
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def _sized(status_line: bytes, *headers: bytes):
    """The head at once, then SLOW_BODY a byte at a time, its length given up front."""
    head = status_line + OK_HEADERS + b"".join(headers)
    head += f"Content-Length: {len(SLOW_BODY)}\r\n\r\n".encode()
    return lambda request: [head, *_bytes(SLOW_BODY)]


def _chunked(request: Request) -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\n" + OK_HEADERS + b"Transfer-Encoding: chunked\r\n\r\n"
    chunks = [b"1\r\n" + byte + b"\r\n" for byte in _bytes(SLOW_BODY)]
    return [head, *chunks, b"0\r\n\r\n"]


def _to_the_end_of_the_stream(request: Request) -> list[bytes]:
    # Neither a length nor chunks: the body ends when the server closes.
    return [b"HTTP/1.1 200 OK\r\n" + OK_HEADERS + b"\r\n", *_bytes(SLOW_BODY), CLOSE]


def _ends_at_the_deadline(server: ScriptedServer) -> None:
    """Call ``server`` with a deadline of ``DEADLINE``: the call ends as timed out at the
    deadline (unknown: the server had the request), hung up before the answer's end."""
    started = time.monotonic()
    with pytest.raises(CallOutcomeUnknown) as unknown:
        send(server.url(), timeout=DEADLINE)
    took = time.monotonic() - started

    assert unknown.value.reason == "timed out"
    assert took < DEADLINE + LATE_BY_AT_MOST, f"the call took {took:.1f} s"
    assert server.client_hung_up.wait(TRICKLE_SECONDS + 2)
    assert not server.finished_answer.is_set()


@pytest.mark.parametrize(
    "script",
    [
        _trickled_head,
        _sized(b"HTTP/1.1 200 OK\r\n"),
        _sized(b"HTTP/1.1 200 OK\r\n", b"Connection: close\r\n"),
        _sized(b"HTTP/1.0 200 OK\r\n"),
        _chunked,
        _to_the_end_of_the_stream,
    ],
    ids=["head", "keep-alive", "connection-close", "http-1.0", "chunked", "end-of-stream"],
)
def test_an_answer_trickled_past_the_deadline_ends_at_it(serve, script):
    server = serve(script, every=EVERY)

    _ends_at_the_deadline(server)


def test_a_kept_alive_connection_reused_for_a_trickled_answer_ends_at_the_deadline(serve):
    # The first call is answered at once and its connection goes back to the pool; the
    # second takes it from there, already connected, and is trickled to.
    server = serve(answer("200 OK", b'{"ok": true}'), _sized(b"HTTP/1.1 200 OK\r\n"), every=EVERY)
    assert send(server.url(), timeout=DEADLINE).status == 200

    _ends_at_the_deadline(server)
    assert (len(server.requests), server.connections) == (2, 1)  # both on one connection


@pytest.fixture
def tls_context(tmp_path, monkeypatch) -> ssl.SSLContext:
    """A TLS context for 127.0.0.1 with a self-signed certificate made here, which the
    sender trusts as it would in production: through the system's ``SSL_CERT_FILE``."""
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
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    return context


def test_a_tls_answer_trickled_past_the_deadline_ends_at_it(serve, tls_context):
    # Connection: close, so the TLS socket is the response's, as in the HTTP/1.0 case.
    server = serve(
        _sized(b"HTTP/1.1 200 OK\r\n", b"Connection: close\r\n"), tls=tls_context, every=EVERY
    )

    _ends_at_the_deadline(server)


def test_a_tls_call_is_done_against_the_trusted_certificate(serve, tls_context):
    server = serve(answer("200 OK", b'{"ok": true}'), tls=tls_context)

    assert send(server.url()).status == 200


# -- the environment's proxy -------------------------------------------------------------


def test_calls_go_through_the_proxy_the_environment_names_read_once_per_url(serve, monkeypatch):
    """A deployment's HTTP proxy applies; reading the environment costs more than a call,
    so it is read once per URL and process."""
    proxy = serve(answer("200 OK"))
    target = "http://billing.invalid/charges"
    monkeypatch.setenv("HTTP_PROXY", proxy.url(""))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    _proxy_for.cache_clear()
    try:
        send(target)
        monkeypatch.setenv("NO_PROXY", "billing.invalid")  # read once: the proxy stays
        send(target)
    finally:
        _proxy_for.cache_clear()

    # A proxy receives the absolute URL as the request's target.
    assert [request.target for request in proxy.requests] == [target, target]


def test_no_proxy_sends_the_call_directly(serve, monkeypatch):
    server = serve(answer("200 OK"))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9/")  # nobody there: would be refused
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    _proxy_for.cache_clear()
    try:
        assert send(server.url()).status == 200
    finally:
        _proxy_for.cache_clear()
    assert [request.target for request in server.requests] == ["/hook"]


def test_the_deadline_is_a_positive_duration_in_seconds_or_a_timedelta(serve):
    server = serve(answer("200 OK"))

    assert send(server.url(), timeout=timedelta(seconds=5)).status == 200
    with pytest.raises(ValueError, match="positive timeout"):
        send(server.url(), timeout=timedelta(0))
    assert len(server.requests) == 1
