"""A real local HTTP server standing in for the billing webhook and the vendor dispatch.

Mocking is limited to what is outside the system; even that runs over real HTTP, so
timeouts, headers and slow answers behave as they do in production. Tests can hold
chosen requests at a gate (the external call "hangs") and release them when they like.
"""

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes
    at: float = field(default_factory=time.monotonic)

    @property
    def json(self):
        return json.loads(self.body)

    @property
    def token(self) -> int:
        return int(self.headers["X-Fencing-Token"])

    @property
    def idempotency_key(self) -> str:
        return self.headers["Idempotency-Key"]


class Gate:
    """Holds matching requests until ``release()``; ``wait_arrived`` waits for them."""

    def __init__(self, predicate):
        self.predicate = predicate
        self._open = threading.Event()
        self._cond = threading.Condition()
        self.arrived = 0

    def _enter(self):
        with self._cond:
            self.arrived += 1
            self._cond.notify_all()
        self._open.wait(timeout=120)

    def wait_arrived(self, count: int = 1, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.arrived < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"only {self.arrived} of {count} requests reached the gate")
                self._cond.wait(remaining)

    def release(self) -> None:
        self._open.set()


class HttpStub:
    def __init__(self):
        self.received: list[Received] = []
        self.status = 200
        # Optional: the status for one request (e.g. refuse only cancellations); else status.
        self.status_for = None
        self.delay = 0.0
        self.gates: list[Gate] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                request = Received(self.path, dict(self.headers.items()), self.rfile.read(length))
                for gate in list(stub.gates):
                    if gate.predicate(request):
                        gate._enter()
                if stub.delay:
                    time.sleep(stub.delay)
                with stub._lock:
                    stub.received.append(request)
                status = stub.status_for(request) if stub.status_for else stub.status
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"ok": true}')

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address
        return f"http://{host}:{port}/hook"

    def hold(self, predicate=lambda request: True) -> Gate:
        gate = Gate(predicate)
        self.gates.append(gate)
        return gate

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        for gate in self.gates:
            gate.release()
        self.server.shutdown()
        self.server.server_close()
