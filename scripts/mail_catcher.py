"""The mail catcher of ``make run``: every email the platform sends, kept and shown in a page.

    python scripts/mail_catcher.py --smtp-port 8003 --port 8002 --dir .local/run/mail \
        [--pid-file .local/run/mail-catcher.pid]

An SMTP server (aiosmtpd, from requirements-dev.txt) takes every message for any address
and answers 250; nothing leaves the machine. Each message is written to ``--dir`` as an
``.eml`` file, and a small web server lists them, newest first, at
``http://HOST:PORT/``: a message's page shows its headers and text with the links
clickable (a reporter's opt-out link opens the development server). ``make run`` points
``EMAIL_URL`` here, so the reporters' emails (``send_reporter_emails``) and the password
resets land in the page, not in the terminal.

Not for production: a deployment sets ``EMAIL_URL`` to its mail server (docs/operations.md).
"""

import argparse
import html
import os
import re
import signal
import sys
import threading
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from pathlib import Path

from aiosmtpd.controller import Controller

NAME = re.compile(r"^(\d{6})\.eml$")
FIELDS = ("Subject", "To", "Date")  # the listing's columns
LINK = re.compile(r"https?://[^\s<>\"']+")


class Store:
    """The caught messages, one ``NNNNNN.eml`` file each in ``folder``, numbered in order."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        numbers = [int(m[1]) for p in folder.iterdir() if (m := NAME.match(p.name))]
        self._next = count(max(numbers, default=0) + 1)
        self._lock = threading.Lock()

    def add(self, content: bytes) -> Path:
        with self._lock:
            path = self.folder / f"{next(self._next):06d}.eml"
        partial = path.with_suffix(".part")
        partial.write_bytes(content)
        partial.rename(path)  # the page never reads half a message
        return path

    def names(self) -> list[str]:
        return sorted((p.name for p in self.folder.iterdir() if NAME.match(p.name)), reverse=True)

    def raw(self, name: str) -> bytes | None:
        if not NAME.match(name) or not (self.folder / name).is_file():
            return None
        return (self.folder / name).read_bytes()

    def read(self, name: str) -> EmailMessage | None:
        content = self.raw(name)
        return None if content is None else message_from_bytes(content, policy=policy.default)


class Catch:
    """aiosmtpd handler: every message is accepted and stored."""

    def __init__(self, store: Store):
        self.store = store

    async def handle_DATA(self, server, session, envelope):
        self.store.add(envelope.original_content or envelope.content)
        return "250 Message accepted for delivery"


def text_of(message: EmailMessage) -> str:
    body = message.get_body(preferencelist=("plain", "html"))
    return body.get_content() if body is not None else ""


def linked(text: str) -> str:
    """``text`` escaped for HTML, its web addresses made links."""
    parts, end = [], 0
    for match in LINK.finditer(text):
        parts.append(html.escape(text[end : match.start()]))
        url = html.escape(match.group())
        parts.append(f'<a href="{url}">{url}</a>')
        end = match.end()
    parts.append(html.escape(text[end:]))
    return "".join(parts)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; margin: 1.5rem auto; max-width: 60rem;
       padding: 0 1rem; color: #1b1f24; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ text-align: left; padding: .35rem .5rem; border-bottom: 1px solid #d0d7de;
          vertical-align: top; }}
pre {{ white-space: pre-wrap; background: #f6f8fa; padding: 1rem; border-radius: 6px; }}
dt {{ font-weight: 600; }} dd {{ margin: 0 0 .4rem 0; }}
</style></head><body>
{content}
</body></html>
"""


class Page(BaseHTTPRequestHandler):
    store: Store
    smtp: str

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path == "/":
            return self.page(200, "Caught mail", self.listing())
        name = path.strip("/")
        message = self.store.read(name)
        if message is None:
            return self.page(404, "Not found", '<p>No such message. <a href="/">All mail</a></p>')
        if query == "raw":
            return self.answer(200, "text/plain; charset=utf-8", self.store.raw(name))
        return self.page(200, str(message["Subject"] or ""), self.one(name, message))

    def listing(self) -> str:
        rows = []
        for name in self.store.names():
            message = self.store.read(name)
            if message is None:
                continue
            subject, to, date = (html.escape(str(message[field] or "")) for field in FIELDS)
            rows.append(
                f'<tr><td><a href="/{name}">{subject or "(no subject)"}</a></td>'
                f"<td>{to}</td><td>{date}</td></tr>"
            )
        intro = (
            f"<h1>Caught mail</h1><p>Every email the development server and its jobs send "
            f"(SMTP on {html.escape(self.smtp)}) lands here; nothing leaves the machine. "
            f"{len(rows)} message{'s' if len(rows) != 1 else ''}, newest first.</p>"
        )
        if not rows:
            return intro
        head = "<tr><th>Subject</th><th>To</th><th>Date</th></tr>"
        return f"{intro}<table>{head}{''.join(rows)}</table>"

    def one(self, name: str, message: EmailMessage) -> str:
        shown = ("From", "To", "Subject", "Date", "Message-ID", "List-Unsubscribe")
        headers = "".join(
            f"<dt>{field}</dt><dd>{linked(str(message[field]))}</dd>"
            for field in shown
            if message[field] is not None
        )
        return (
            f'<p><a href="/">All mail</a> · <a href="/{name}?raw">raw</a></p>'
            f"<dl>{headers}</dl><pre>{linked(text_of(message))}</pre>"
        )

    def page(self, status: int, title: str, content: str) -> None:
        body = PAGE.format(title=html.escape(title), content=content).encode()
        self.answer(status, "text/html; charset=utf-8", body)

    def answer(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="the page's port")
    parser.add_argument("--smtp-port", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True, help="where the messages are kept")
    parser.add_argument("--pid-file", help="written once both servers listen (make stop reads it)")
    options = parser.parse_args()

    store = Store(options.dir)
    smtp = Controller(Catch(store), hostname=options.host, port=options.smtp_port)
    smtp.start()
    Page.store, Page.smtp = store, f"{options.host}:{options.smtp_port}"
    try:
        server = ThreadingHTTPServer((options.host, options.port), Page)
    except OSError:
        smtp.stop()
        raise
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # make stop: clean up below
    if options.pid_file:
        Path(options.pid_file).write_text(f"{os.getpid()}\n")
    print(
        f"mail catcher: SMTP on {options.host}:{options.smtp_port}, the mail at "
        f"http://{options.host}:{options.port}/",
        file=sys.stderr,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        smtp.stop()
        if options.pid_file:
            Path(options.pid_file).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
