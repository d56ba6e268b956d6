"""A receiving service that answers as a script says, for the sender's tests: a real socket
server on 127.0.0.1 that reads each request and sends the next scripted answer piece by
piece (a trickle, a cut-off body, a connection closed with no answer), and records what it
was sent and whether the client hung up before the answer's end.
"""

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

CLOSE = b""  # a piece that closes the connection where it stands


@dataclass(frozen=True)
class Request:
    head: bytes
    body: bytes

    @property
    def target(self) -> str:
        """The request line's target: a path, or an absolute URL through a proxy."""
        return self.head.split(b"\r\n", 1)[0].split(b" ")[1].decode()

    @property
    def method(self) -> str:
        return self.head.split(b" ", 1)[0].decode()

    @property
    def headers(self) -> dict[str, str]:
        lines = self.head.decode("latin-1").split("\r\n")[1:]
        return dict(line.split(": ", 1) for line in lines if ": " in line)


# An answer: the pieces to send for a request, one every ``every`` seconds.
Answer = Callable[[Request], list[bytes]]


def answer(status: str, body: bytes = b"{}", *headers: str) -> Answer:
    """A whole answer at once: ``status`` (``"200 OK"``), ``body`` and ``headers``."""
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
    head += "".join(f"{header}\r\n" for header in headers)
    head += f"Content-Length: {len(body)}\r\n\r\n"
    return lambda request: [head.encode() + body]


class ScriptedServer(threading.Thread):
    """Serves the connections it accepts one after the other; each request gets the next of
    ``answers`` (the last one again when they run out)."""

    def __init__(
        self, answers: list[Answer], *, every: float = 0.1, tls: ssl.SSLContext | None = None
    ):
        super().__init__(daemon=True)
        self.answers = answers
        self.every = every
        self.tls = tls
        self.requests: list[Request] = []
        self.connections = 0
        self.client_hung_up = threading.Event()
        self.finished_answer = threading.Event()
        self._stopped = threading.Event()
        self._connection: socket.socket | None = None
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]

    def url(self, path: str = "hook") -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/{path}"

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:  # the listener was closed: stop
                return
            self.connections += 1
            self._connection = connection
            connection.settimeout(10)
            try:
                if self.tls:
                    connection = self.tls.wrap_socket(connection, server_side=True)
                    self._connection = connection
                with connection:
                    self._serve(connection)
            except OSError:
                pass

    def _serve(self, connection: socket.socket) -> None:
        unread = b""
        while True:
            request, unread = self._read_request(connection, unread)
            if request is None:
                return
            self.requests.append(request)
            self.finished_answer.clear()  # says whether the last answer was sent in full
            script = self.answers[min(len(self.requests), len(self.answers)) - 1]
            pieces = script(request)
            try:
                for number, piece in enumerate(pieces):
                    if piece == CLOSE:
                        return
                    connection.sendall(piece)
                    if number < len(pieces) - 1:
                        time.sleep(self.every)
            except OSError:  # reset or broken pipe: the client closed the call
                self.client_hung_up.set()
                return
            self.finished_answer.set()

    def _read_request(self, connection, unread: bytes) -> tuple[Request | None, bytes]:
        """One request, its body included, and what came after it (``None``: the client
        closed the connection, or shut it down)."""
        try:
            while b"\r\n\r\n" not in unread:
                data = connection.recv(65536)
                if not data:
                    if unread == b"":
                        self.client_hung_up.set()
                    return None, b""
                unread += data
            head, _, unread = unread.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(unread) < length:
                data = connection.recv(65536)
                if not data:
                    return None, b""
                unread += data
        except OSError:
            self.client_hung_up.set()
            return None, b""
        return Request(head, unread[:length]), unread[length:]

    def stop(self) -> None:
        self._stopped.set()
        self.listener.close()
        if self._connection is not None:  # kept alive by the client's pool: end it
            with contextlib.suppress(OSError):
                self._connection.shutdown(socket.SHUT_RDWR)
        self.join(10)
