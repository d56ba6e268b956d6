"""The stand-in payment service of ``make run``: pays each invoice once, as a real one must.

    python scripts/payment_standin.py --port 8001 [--pid-file .local/payment-standin.pid]

It receives the platform's payment calls (``vendors.payment_client``) through locking's
receiver (``locking.receive_call``), as the stand-in of the tests does: the signature is
checked with ``WEBHOOK_SIGNING_SECRET`` (the secret the platform signs with), the highest
token per invoice is kept in the development database (``locking.models.ReceivedCall``),
and a lower token is refused (409). The first call of an invoice's key "pays" it (a line on
stderr); a later call that replaces it (a higher token: a payer that took over) is answered
with the same payment's reference and pays nothing. Nothing leaves the machine.

Not for production: a deployment points ``VENDOR_PAYMENT_URL`` at its payment provider
(docs/operations.md, "The payment service").
"""

import argparse
import hashlib
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hoa.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connections  # noqa: E402
from django.http import JsonResponse  # noqa: E402

from locking.receiving import receive_call  # noqa: E402

SCOPE = "payment"  # the endpoint the platform seals its payment calls for


def reference_of(idempotency_key: str) -> str:
    """The stand-in's reference for the payment of a key: the same for every call of it."""
    return "PAY-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:12].upper()


def pay(call):
    reference = reference_of(call.idempotency_key)
    invoice = call.payload.get("invoice", {})
    if call.replaces is None:
        print(
            f"payment stand-in: paid invoice {invoice.get('id')} {invoice.get('amount')} "
            f"{invoice.get('currency')} (token {call.token}, reference {reference})",
            file=sys.stderr,
        )
    else:
        print(
            f"payment stand-in: invoice {invoice.get('id')} was paid already (token "
            f"{call.token} replaces {call.replaces}); nothing paid",
            file=sys.stderr,
        )
    return JsonResponse({"reference": reference, "paid": call.replaces is None})


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            receipt = receive_call(
                dict(self.headers.items()),
                body,
                pay,
                scope=SCOPE,
                secret=settings.WEBHOOK_SIGNING_SECRET,
            )
        finally:
            connections.close_all()  # this request's thread ends here
        response = receipt.response
        self.send_response(response.status_code)
        self.send_header("Content-Type", response.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(response.content)))
        self.end_headers()
        self.wfile.write(response.content)

    def log_message(self, *args):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid-file", help="write this process's id there (make stop reads it)")
    options = parser.parse_args()
    if not settings.WEBHOOK_SIGNING_SECRET:
        parser.error("WEBHOOK_SIGNING_SECRET must be set: the stand-in checks the signature")
    if options.pid_file:
        Path(options.pid_file).write_text(f"{os.getpid()}\n")
    server = ThreadingHTTPServer((options.host, options.port), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # make stop: clean up below
    print(f"payment stand-in on http://{options.host}:{options.port}/{SCOPE}", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if options.pid_file:
            Path(options.pid_file).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
