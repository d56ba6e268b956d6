"""Outbound webhook calls shared by the billing and dispatch clients.

One POST per fenced attempt, sealed by ``locking.seal_call`` (locking/receiving/signing.py:
the one implementation of the envelope, shared with locking's receiver), carrying:

- ``Idempotency-Key``: the business key, so the receiver can collapse retries;
- ``X-Fencing-Token``: the lease's token, so the receiver can refuse a stale holder;
- ``X-Timestamp``: when it was sent (seconds since the epoch);
- ``X-Signature: sha256=<hex HMAC-SHA256 of the body>`` keyed with
  ``WEBHOOK_SIGNING_SECRET`` (omitted when no secret is configured).

The body repeats the three values the receiver acts on (``idempotency_key``,
``fencing_token``, ``sent_at``), so the signature over the body covers them too: a captured
call cannot be replayed late or with another key or token, and
``locking.verify_signature`` checks that the headers agree with the signed body.

The body also names the ``endpoint`` the call is for (the receiver's scope: ``billing``,
``dispatch``…), under the signature, so a receiver that shares the secret with another
endpoint refuses a call meant for that one.

Every call ends in one of three outcomes, and only the first two are known:

- **done**: a 2xx answer, read in full;
- **refused**: the receiver said no and did nothing: a 4xx answer (``ExternalCallFailed``),
  or the connection could not be made, so nothing was sent. A receiver that keeps the
  highest token per key (``locking.fenced_receiver``) answers a call older than one it
  accepted with 409: not a failed call but a stale holder, so it raises
  ``locking.StaleAtReceiver`` (a ``StaleFencingToken``), which the runner answers as the
  operation's *superseded* refusal (409 / exit 75, audited ``stale``). The token it says it
  accepted counts only when its answer is signed and names this call;
- **unknown**: the request may have been acted on and we cannot tell
  (``ExternalCallUnknown``): a timeout once connected, a connection closed or reset before
  the whole answer came, a partial or unreadable answer, a redirect (never followed: a
  POST re-sent as a body-less GET proves nothing), or a 5xx (the receiver itself failed,
  maybe after acting). Never "nothing was saved": the runner records it, and it is settled
  later by the same ``Idempotency-Key`` (docs/threat-model.md, "What the outside was
  told").

``EXTERNAL_CALL_TIMEOUT_SECONDS`` is a deadline for the whole call: connecting, sending and
every read of the answer. A socket timeout bounds one read, so a receiver that trickles its
answer a byte at a time would keep the call open for as long as it likes, past the lease
(check ``hoa.W001`` promises a call ends within half of it). At the deadline a watchdog
shuts the call's socket down, and the call ends as timed out (``_Deadline``): unknown,
since the receiver may have acted on it.

See docs/security.md for how a receiver verifies and uses them.
"""

import contextlib
import functools
import logging
import socket
import threading
from dataclasses import dataclass

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError

from locking import StaleAtReceiver, seal_call

logger = logging.getLogger(__name__)

# The answer of a receiver that had already accepted a higher token for the key.
STALE_STATUS = 409


class ExternalCallFailed(Exception):
    """The external system refused the call, or it could not be reached: it did nothing."""

    def __init__(self, url: str, reason: str, status: int | None = None):
        self.url = url
        self.reason = reason
        self.status = status
        super().__init__(f"call to {url} failed: {reason}")


class ExternalCallUnknown(Exception):
    """The call may have been acted on, and its answer does not say (a timeout once
    connected, a closed connection, a partial answer, a redirect, a 5xx). Not a subclass of
    ``ExternalCallFailed`` on purpose: a caller that knows only refusals must not take this
    for one. Settled later by the same ``idempotency_key``."""

    def __init__(
        self,
        url: str,
        reason: str,
        status: int | None = None,
        *,
        idempotency_key: str = "",
        endpoint: str = "",
    ):
        self.url = url
        self.reason = reason
        self.status = status
        self.idempotency_key = idempotency_key
        self.endpoint = endpoint
        super().__init__(f"call to {url} has an unknown outcome: {reason}")


@dataclass(frozen=True)
class CallResult:
    skipped: bool
    status: int | None = None
    content: bytes = b""  # the receiver's answer (the payment service's reference)


# -- the deadline ------------------------------------------------------------------------

_current = threading.local()  # the _Deadline of this thread's call in flight, if any


class _Deadline:
    """One call's deadline: a timer that shuts down the socket carrying the call when the
    deadline passes. The connection notes that socket as it connects and as it sends.

    The socket itself is kept, not looked up on the connection when the timer fires:
    http.client hands it to the response and drops it from the connection
    (``HTTPConnection.close()`` in ``getresponse()``) whenever the answer's headers say the
    connection will close (``HTTP/1.0``, ``Connection: close``, a body that ends when the
    stream does), and the body is then read through the response alone."""

    def __init__(self, seconds: float):
        self.passed = False
        self._socket = None
        self._lock = threading.Lock()  # the socket noted and the timer firing: one order
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        _current.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._timer.cancel()
        _current.deadline = None

    def watch(self, sock) -> None:
        """Note ``sock`` as the socket carrying the call (a TLS socket replaces the TCP
        socket it took over); shut it down at once if the deadline has passed already."""
        with self._lock:
            self._socket = sock
            passed = self.passed
        if passed:  # connected after the deadline: the call goes no further
            _shut_down(sock)

    def _expire(self) -> None:
        with self._lock:
            self.passed = True
            sock = self._socket
        if sock is not None:
            _shut_down(sock)


def _shut_down(sock) -> None:
    """Shut down the TCP connection under ``sock``: the blocked send or read, in the
    call's thread, returns at once (already closed: the call ended, nothing to do)."""
    while not isinstance(sock, socket.socket):  # urllib3's TLS inside a TLS proxy tunnel
        sock = sock.socket
    # socket.socket's shutdown, not SSLSocket's: that one drops the TLS state before it
    # shuts the socket, and in between the call's thread could write past TLS (the request
    # in clear) or read into a ValueError that requests does not turn into its errors.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _watch(sock) -> None:
    """Tell the thread's call in flight, if any, that ``sock`` carries it."""
    deadline = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.watch(sock)


class _Watched:
    """A urllib3 connection that tells the thread's ``_Deadline`` which socket carries the
    call: the TCP socket once connected (a TLS handshake on it is bounded too), the TLS
    socket once wrapped, and the socket kept alive from an earlier call as it sends."""

    def _new_conn(self):
        sock = super()._new_conn()
        _watch(sock)
        return sock

    def connect(self):
        super().connect()
        _watch(self.sock)

    def request(self, *args, **kwargs):
        if self.sock is not None:  # taken from the pool: connect() is not called again
            _watch(self.sock)
        return super().request(*args, **kwargs)


class _WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _DeadlineAdapter(HTTPAdapter):
    """requests' adapter, whose pools make connections a ``_Deadline`` can shut down."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _WatchedHTTPPool,
            "https": _WatchedHTTPSPool,
        }


# One pooled session per process. requests reads the proxy variables, the CA bundle
# variables and ~/.netrc again on every call when a session trusts the environment (about
# 0.5 ms a call here, a month start's 10,000 calls included); this one does not, and each
# call passes what the environment says for its URL, read once per URL (``_environment``).
_session = requests.Session()
_session.trust_env = False
for _scheme in ("http://", "https://"):
    _session.mount(_scheme, _DeadlineAdapter())


@functools.cache
def _environment(url: str) -> dict:
    """What requests would take from the environment for ``url`` (``proxies``, ``verify``,
    ``auth`` from ~/.netrc), as keyword arguments of a call; read once per URL and process."""
    with requests.Session() as reader:  # trusts the environment, as requests does by default
        found = reader.merge_environment_settings(url, {}, None, None, None)
    return {
        "proxies": found["proxies"],
        "verify": found["verify"],
        "auth": requests.utils.get_netrc_auth(url),
    }


def post_fenced(
    url: str, payload: dict, *, idempotency_key: str, token, endpoint: str
) -> CallResult:
    """POST ``payload`` once to ``url`` with the fencing headers, sealed for ``endpoint``.

    ``token`` is the lease (or its ``fencing_token``); a bare ``int`` raises ``TypeError``.
    Raise ``StaleAtReceiver`` when the receiver answers 409 (it had accepted a newer
    holder's call), ``ExternalCallFailed`` when it refuses otherwise (a 4xx) or cannot be
    reached, and ``ExternalCallUnknown`` when it may have acted without saying so: no whole
    answer within ``EXTERNAL_CALL_TIMEOUT_SECONDS`` (the whole call's deadline), a lost
    connection, a redirect, a 5xx.
    An empty ``url`` means the integration is not configured: the call is skipped (logged).
    """
    secret = settings.WEBHOOK_SIGNING_SECRET
    call = seal_call(
        payload, idempotency_key=idempotency_key, token=token, secret=secret, endpoint=endpoint
    )
    if not url:
        logger.info(
            "external call skipped: no URL configured",
            extra={"idempotency_key": idempotency_key, "endpoint": endpoint},
        )
        return CallResult(skipped=True)
    limit = float(settings.EXTERNAL_CALL_TIMEOUT_SECONDS)

    def unknown(reason: str, status: int | None = None) -> ExternalCallUnknown:
        return ExternalCallUnknown(
            url, reason, status, idempotency_key=idempotency_key, endpoint=endpoint
        )

    try:
        with _Deadline(limit) as deadline:
            response = _session.post(
                url,
                data=call.body,
                headers=call.headers,
                timeout=limit,  # each connect and read, within the deadline's
                allow_redirects=False,  # a redirected POST proves nothing: unknown
                **_environment(url),
            )
    except requests.RequestException as exc:
        if _never_sent(exc):
            raise ExternalCallFailed(url, _connect_reason(exc)) from exc
        if deadline.passed or isinstance(exc, requests.Timeout):
            raise unknown("timed out") from exc
        raise unknown(_lost_reason(exc)) from exc
    if deadline.passed:  # the answer came in as the watchdog fired: the call ran late
        raise unknown("timed out")
    status = response.status_code
    if status == STALE_STATUS:
        raise StaleAtReceiver.from_answer(
            token, response.content, headers=response.headers, sent=call, secret=secret, url=url
        )
    if 300 <= status < 400:
        raise unknown(f"HTTP {status}: redirected, not followed", status)
    if status >= 500 or status < 200:
        raise unknown(f"HTTP {status}", status)
    if status >= 400:
        raise ExternalCallFailed(url, f"HTTP {status}", status)
    return CallResult(skipped=False, status=status, content=response.content)


def _never_sent(exc: requests.RequestException) -> bool:
    """Whether the call failed before a byte of the request left: no connection was made
    (refused, unreachable, a name that does not resolve, the connect timed out)."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if not isinstance(exc, requests.ConnectionError) or isinstance(
        exc, requests.exceptions.ProxyError | requests.exceptions.SSLError
    ):
        return False
    reason = exc.args[0] if exc.args else None
    cause = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the cause
    return isinstance(cause, NewConnectionError)  # NameResolutionError too


def _connect_reason(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.ConnectTimeout):
        return "could not connect: timed out"
    return "could not connect"


def _lost_reason(exc: requests.RequestException) -> str:
    """What was lost of a call that had started: the connection, or the answer."""
    if isinstance(
        exc, requests.exceptions.ChunkedEncodingError | requests.exceptions.ContentDecodingError
    ):
        return "the answer was cut off"
    return "the connection was lost before the answer"
