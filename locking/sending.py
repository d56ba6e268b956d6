"""The sending side of a fenced call: one sealed POST, within a deadline, and what came of it.

``post_fenced`` seals the call (``seal_call``), POSTs it once on urllib3 and answers done
(``CallAnswer``), refused (``CallRefused``: a 4xx, or nothing sent; a signed 409 naming this
call is ``StaleAtReceiver``) or unknown (``CallOutcomeUnknown``: it may have been acted on).
``timeout`` bounds the whole call: a watchdog shuts its socket at the deadline
(``_Deadline``). The documentation's 'The sending side' page says each case and why.
"""

import contextlib
import functools
import json
import logging
import socket
import threading
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import urllib3
from django.core.serializers.json import DjangoJSONEncoder
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    DecodeError,
    HTTPError,
    LocationValueError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)

from locking.exceptions import CallOutcomeUnknown, CallRefused, StaleAtReceiver
from locking.keys import LeaseOrToken
from locking.receiving.signing import SealedCall, open_answer, seal_call

__all__ = ["CallAnswer", "CallOutcomeUnknown", "CallRefused", "post_fenced"]

logger = logging.getLogger(__name__)

# The answer of a receiver that had already accepted a higher token for the key.
STALE_STATUS = 409
# Connections kept alive per host, as many as the threads that call it at once.
POOL_SIZE = 10


@dataclass(frozen=True)
class CallAnswer:
    """A done call: the receiver's 2xx answer, read in full."""

    status: int
    content: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


def post_fenced(
    url: str,
    payload: Mapping[str, object],
    *,
    lease: LeaseOrToken,
    idempotency_key: str,
    endpoint: str,
    secret: str,
    timeout: timedelta | float,
    encoder: type[json.JSONEncoder] = DjangoJSONEncoder,
) -> CallAnswer:
    """POST ``payload`` once to ``url``, sealed for ``endpoint`` under ``lease``; return the
    2xx answer (``locking.sending.CallAnswer``: its ``status``, ``content`` and ``headers``).

    ``lease`` is the lease (or its ``fencing_token``); a bare ``int`` raises ``TypeError``.
    ``secret`` signs the call (the receiver's, shared; ``""`` sends it unsigned, and a
    fenced receiver refuses it). ``timeout`` bounds the whole call; keep it well inside the
    lease. Raise ``CallRefused`` (a 4xx, or no connection made), ``StaleAtReceiver`` (a
    signed 409 naming this call: the receiver had accepted a newer holder's call for the
    key) or ``CallOutcomeUnknown`` (it may have been acted on: see the module's docstring).
    """
    call = seal_call(
        payload,
        idempotency_key=idempotency_key,
        token=lease,
        secret=secret,
        endpoint=endpoint,
        encoder=encoder,
    )
    limit = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if not limit > 0:
        raise ValueError(f"post_fenced() needs a positive timeout, got {timeout!r}")
    told = _Told(url, idempotency_key, endpoint)
    status, headers, content = _send(call, told, limit)
    signed = open_answer(headers, content, sent=call, secret=secret)
    if status == STALE_STATUS and signed is not None:
        raise StaleAtReceiver.from_answer(
            lease, content, headers=headers, sent=call, secret=secret, url=url
        )
    if 300 <= status < 400:
        raise told.unknown(f"HTTP {status}: redirected, not followed", status)
    if status >= 500 or status < 200:
        raise told.unknown(f"HTTP {status}", status)
    if status >= 400:
        raise told.refused(f"HTTP {status}", status)
    return CallAnswer(status, content, dict(headers))


@dataclass(frozen=True)
class _Told:
    """The call's address, for the exceptions that say what the outside was told."""

    url: str
    idempotency_key: str
    endpoint: str

    def refused(self, reason: str, status: int | None = None) -> CallRefused:
        return CallRefused(
            self.url, reason, status, idempotency_key=self.idempotency_key, endpoint=self.endpoint
        )

    def unknown(self, reason: str, status: int | None = None) -> CallOutcomeUnknown:
        return CallOutcomeUnknown(
            self.url, reason, status, idempotency_key=self.idempotency_key, endpoint=self.endpoint
        )


def _send(call: SealedCall, told: _Told, limit: float) -> tuple[int, Any, bytes]:
    """One POST of ``call`` within ``limit`` seconds: the answer's status, headers and
    content, read in full; ``CallRefused`` when nothing was sent, ``CallOutcomeUnknown``
    when it may have been acted on and the answer did not come whole and in time."""
    try:
        pool = _pool_for(told.url)
    except LocationValueError as exc:  # nothing could be sent
        raise told.refused(f"not a URL that can be called: {exc}") from exc
    with _Deadline(limit) as deadline:
        try:
            response = pool.urlopen(
                "POST",
                told.url,
                body=call.body,
                headers={"User-Agent": USER_AGENT, **call.headers},
                timeout=urllib3.Timeout(connect=limit, read=limit),  # within the deadline's
                retries=False,  # one POST per attempt: a retry is the caller's, by its key
                redirect=False,  # a redirected POST proves nothing: unknown
                preload_content=False,  # read below, where a cut-off answer is told apart
            )
        except NewConnectionError as exc:  # refused, unreachable, a name that does not resolve
            raise told.refused("could not connect") from exc
        except ConnectTimeoutError as exc:
            raise told.refused("could not connect: timed out") from exc
        except LocationValueError as exc:
            raise told.refused(f"not a URL that can be called: {exc}") from exc
        except (HTTPError, OSError) as exc:
            reason = "timed out" if deadline.passed or _timed_out(exc) else _LOST
            raise told.unknown(reason) from exc
        try:
            content = response.read()
        except (HTTPError, OSError) as exc:
            reason = "timed out" if deadline.passed or _timed_out(exc) else _cut_off(exc)
            raise told.unknown(reason) from exc
        finally:
            response.release_conn()
    if deadline.passed:  # the answer came in as the watchdog fired: the call ran late
        raise told.unknown("timed out")
    return response.status, response.headers, content


USER_AGENT = "django-fenced-writes"
_LOST = "the connection was lost before the answer"


def _timed_out(exc: BaseException) -> bool:
    return isinstance(exc, ReadTimeoutError | TimeoutError | socket.timeout)


def _cut_off(exc: BaseException) -> str:
    """What was lost of an answer whose head had come: its body, or the connection."""
    if isinstance(exc, ProtocolError | DecodeError):
        return "the answer was cut off"
    return _LOST


# -- the pools ---------------------------------------------------------------------------

_managers: dict[str | None, urllib3.PoolManager] = {}
_managers_lock = threading.Lock()


def _pool_for(url: str) -> urllib3.PoolManager:
    """The process's pool manager for ``url``: through the environment's proxy for it, if
    any, whose connections a ``_Deadline`` can shut down."""
    proxy = _proxy_for(url)
    with _managers_lock:
        manager = _managers.get(proxy)
        if manager is None:
            if proxy is None:
                manager = urllib3.PoolManager(num_pools=POOL_SIZE, maxsize=POOL_SIZE)
            else:
                manager = urllib3.ProxyManager(proxy, num_pools=POOL_SIZE, maxsize=POOL_SIZE)
            manager.pool_classes_by_scheme = {
                "http": _WatchedHTTPPool,
                "https": _WatchedHTTPSPool,
            }
            _managers[proxy] = manager
        return manager


@functools.cache
def _proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``None``: none, or ``NO_PROXY`` says
    to go direct), read once per URL and process: reading it costs more than a call."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LocationValueError(f"{url!r} is not an http:// or https:// URL")
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.netloc.rpartition("@")[2]):
        return None
    return proxy


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
        self._socket: Any = None
        self._lock = threading.Lock()  # the socket noted and the timer firing: one order
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        _current.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()
        _current.deadline = None

    def watch(self, sock: Any) -> None:
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


def _shut_down(sock: Any) -> None:
    """Shut down the TCP connection under ``sock``: the blocked send or read, in the
    call's thread, returns at once (already closed: the call ended, nothing to do)."""
    while not isinstance(sock, socket.socket):  # urllib3's TLS inside a TLS proxy tunnel
        sock = sock.socket
    # socket.socket's shutdown, not SSLSocket's: that one drops the TLS state before it
    # shuts the socket, and in between the call's thread could write past TLS (the request
    # in clear) or read into a ValueError that is none of urllib3's errors.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _watch(sock: Any) -> None:
    """Tell the thread's call in flight, if any, that ``sock`` carries it."""
    deadline = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.watch(sock)


class _Watched:
    """A urllib3 connection that tells the thread's ``_Deadline`` which socket carries the
    call: the TCP socket once connected (a TLS handshake on it is bounded too), the TLS
    socket once wrapped, and the socket kept alive from an earlier call as it sends."""

    sock: Any

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()  # type: ignore[misc]
        _watch(sock)
        return sock

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _watch(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:  # taken from the pool: connect() is not called again
            _watch(self.sock)
        super().request(*args, **kwargs)  # type: ignore[misc]


class _WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection
