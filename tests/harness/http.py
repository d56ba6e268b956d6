"""A real local HTTP server standing in for the billing webhook and the vendor dispatch.

Mocking is limited to what is outside the system; even that runs over real HTTP, so
timeouts, headers and slow answers behave as they do in production. Tests can hold
chosen requests at a gate (the external call "hangs") and release them when they like.

The stand-in receives as a real service would, with locking's receiver
(``locking.receive_call``), one endpoint per path (``url_for("billing")`` is ``/billing``,
whose receiver's scope is ``billing``; ``/dispatch/cancel`` is ``dispatch-cancel``): it
verifies the signature (``LOCK_RECEIVER_SECRET`` unless given ``secret``) and that the call
was sealed for that endpoint, and keeps, per endpoint and ``Idempotency-Key``, the highest token
accepted in ``locking.models.ReceivedCall`` (the Django database of the process it runs
in): a higher token replaces the record, a lower one is answered 409, a replay gets the
first answer. Dispatch calls are also fenced per complaint (``fenced_resource``). That
record is the billing (or dispatch) record the tests count. A payment call (its key
``vendor-payment:invoice:<id>``) pays the invoice the first time its key is accepted and
never again: a later call that replaces it (a higher token, ``call.replaces``) is answered
with the same payment's reference, unpaid; ``payments`` lists what was paid, once the
receiver's transaction committed. A test can still force an
answer (``status``, or ``status_for`` returning a status; ``None`` lets the receiver
answer), or make a stand-in that only records (``HttpStub(receiver=False)``).

``lose_answer(request)`` makes the outside act and its answer go astray: the receiver
decides (pays, bills, dispatches) and the caller then gets, instead of its answer,
``"500"`` (an error page), ``"redirect"`` (a 302 elsewhere), ``"close"`` (the connection
closed with no answer), ``"partial"`` (half a body) or ``"timeout"`` (no answer within
``lost_delay`` seconds); ``None`` answers as usual. ``gets`` lists any GET that arrives
(a redirected POST followed as a GET would).
"""

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes
    at: float = field(default_factory=time.monotonic)
    # What the stand-in answered, and the receiver's verdict ("" when it did not decide).
    status: int = 0
    verdict: str = ""

    @property
    def accepted(self) -> bool:
        return 200 <= self.status < 300

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
    """Holds matching requests until ``release()``; ``wait_arrived`` waits for them.

    By default a request is held before the service decides it (the call is still on its
    way: it arrives when released); with ``answered`` after (the service accepted it, and
    its answer is on its way back).
    """

    def __init__(self, predicate, *, answered: bool = False):
        self.predicate = predicate
        self.answered = answered
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
    def __init__(self, *, receiver: bool = True, secret: str | None = None):
        self.received: list[Received] = []
        # A forced answer for every request (None: the receiver answers).
        self.status: int | None = None
        # Optional: a forced answer for one request (None: as ``status``).
        self.status_for = None
        self.delay = 0.0
        self.gates: list[Gate] = []
        self.receiver = receiver
        self.secret = secret
        # What the payment stand-in paid: one entry per invoice, or it paid twice.
        self.payments: list[Paid] = []
        self.lose_answer = None
        self.lost_delay = 5.0
        self.gets: list[str] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                request = Received(self.path, dict(self.headers.items()), self.rfile.read(length))
                stub._hold(request, answered=False)
                if stub.delay:
                    time.sleep(stub.delay)
                status, content_type, content, verdict, signed = stub._answer(request)
                request.status, request.verdict = status, verdict
                with stub._lock:
                    stub.received.append(request)
                stub._hold(request, answered=True)
                lost = stub.lose_answer(request) if stub.lose_answer else None
                if lost is not None:
                    self._lose(lost, content)
                    return
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(content)))
                for name, value in signed.items():  # a refusal's signature and timestamp
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(content)

            def _lose(self, how: str, content: bytes) -> None:
                """The outside acted; its answer goes astray as ``how`` says."""
                if how == "close":
                    self.close_connection = True
                    return
                if how == "timeout":
                    time.sleep(stub.lost_delay)
                    return
                status = {"500": 500, "redirect": 302, "partial": 200}[how]
                self.send_response(status)
                if how == "redirect":
                    self.send_header("Location", "/moved")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))  # partial: announced
                self.end_headers()
                self.wfile.write(content[: len(content) // 2] if how == "partial" else content)
                if how == "partial":
                    self.close_connection = True

            def do_GET(self):
                with stub._lock:
                    stub.gets.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url_for(self, endpoint: str) -> str:
        """The address of one endpoint of the stand-in (``billing``, ``dispatch``…)."""
        host, port = self.server.server_address
        return f"http://{host}:{port}/{endpoint}"

    def accepted(self) -> list[Received]:
        """The requests the stand-in answered with 2xx, in the order it answered them."""
        with self._lock:
            return [request for request in self.received if request.accepted]

    def hold(self, predicate=lambda request: True, *, answered: bool = False) -> Gate:
        """Hold the requests ``predicate`` picks: before the service decides them, or with
        ``answered`` after it did (their answers wait)."""
        gate = Gate(predicate, answered=answered)
        self.gates.append(gate)
        return gate

    def _hold(self, request: Received, *, answered: bool) -> None:
        for gate in list(self.gates):
            if gate.answered == answered and gate.predicate(request):
                gate._enter()

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        for gate in self.gates:
            gate.release()
        self.server.shutdown()
        self.server.server_close()

    def _kept(self, call):
        """What the stand-in service does with an accepted call: the receiver's record of
        it (locking's ``ReceivedCall``) is the billing or dispatch record; a payment call
        also pays, on its key's first acceptance only."""
        from django.db import transaction
        from django.http import HttpResponse, JsonResponse

        if not call.idempotency_key.startswith("vendor-payment:"):
            return HttpResponse(OK, content_type="application/json")
        reference = payment_reference(call.idempotency_key)
        if call.replaces is None:  # the key's first call: pay, once the receiver commits
            paid = Paid(
                call.idempotency_key, call.token, call.payload["invoice"]["amount"], reference
            )
            transaction.on_commit(lambda: self._paid(paid))
        return JsonResponse({"reference": reference, "paid": call.replaces is None})

    def _paid(self, paid: "Paid") -> None:
        with self._lock:
            self.payments.append(paid)

    def _answer(self, request: Received) -> tuple[int, str, bytes, str, dict]:
        forced = self.status_for(request) if self.status_for else None
        if forced is None:
            forced = self.status
        if forced is not None or not self.receiver:
            return forced or 200, "application/json", OK, "", {}
        from django.db import connections

        from locking.receiving import receive_call

        try:
            receipt = receive_call(
                request.headers,
                request.body,
                self._kept,
                scope=endpoint_of(request.path),
                resource=fenced_resource,
                secret=self.secret,
            )
        except Exception as exc:  # the stand-in's own failure: say so, as a 500
            return 500, "text/plain", f"stand-in failed: {exc!r}".encode(), "error", {}
        finally:
            connections.close_all()  # this request's thread ends here
        response = receipt.response
        signed = {name: response[name] for name in SIGNED_ANSWER_HEADERS if name in response}
        return (
            response.status_code,
            response.get("Content-Type", "application/json"),
            response.content,
            receipt.verdict,
            signed,
        )


OK = b'{"ok": true}'
# What the receiver signs its refusals with (locking.receiving.signing.seal_answer).
SIGNED_ANSWER_HEADERS = ("X-Signature", "X-Timestamp")


def endpoint_of(path: str) -> str:
    """The endpoint a path is: ``/billing`` is ``billing``, ``/dispatch/cancel`` is
    ``dispatch-cancel`` (the receiver's scope, which the sender's seal must name)."""
    return urlsplit(path).path.strip("/").replace("/", "-")


def fenced_resource(idempotency_key: str) -> str | None:
    """The lease a call was made under, as the dispatch service knows its keys: one per
    complaint (``vendor-assignment:<complaint>:<vendor>:replacing:<id>`` names one change
    of it), so another vendor's dispatch under an older lease is refused too. Billing's
    key is its lease's own (one per organization and month): ``None``, the key alone."""
    kind, _, rest = idempotency_key.partition(":")
    if kind == "vendor-assignment":
        return f"{kind}:{rest.partition(':')[0]}"
    return None


@dataclass(frozen=True)
class Paid:
    """A payment the stand-in payment service made."""

    idempotency_key: str
    token: int
    amount: str
    reference: str


def payment_reference(idempotency_key: str) -> str:
    """The stand-in's reference for the payment of a key: the same for every call of it."""
    return "PAY-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:12].upper()
