"""A real SMTP server for the tests that send mail: aiosmtpd on a free loopback port.

``Mailbox`` is its handler: it keeps every message it accepted, and can be told how to
answer the next ones, to stand in for a mail server that refuses (``answer = "451 …"``),
hangs in the middle of a message (``hold()``, released by the test) or drops the
connection before answering (``drop = True``: the client cannot know whether it was taken).
"""

import asyncio
import threading
from email import message_from_bytes, policy
from email.message import Message

from aiosmtpd.controller import Controller

from tests.harness.net import LOOPBACK, free_port

ACCEPTED = "250 Message accepted for delivery"


class Mailbox:
    """aiosmtpd handler: keeps every message the server accepted (``messages``), and every
    message it was sent, accepted or not (``received``)."""

    def __init__(self):
        self.messages: list[Message] = []
        self.recipients: list[list[str]] = []
        self.received: list[Message] = []
        self.answer = ACCEPTED
        self.drop = False
        self._held = threading.Event()
        self._held.set()
        self.waiting = threading.Semaphore(0)

    def hold(self) -> None:
        """Keep the next messages waiting for their answer until ``release()``."""
        self._held.clear()

    def release(self) -> None:
        self._held.set()

    async def handle_DATA(self, server, session, envelope):
        # The default policy unfolds headers, as a mail client reads them: a Message-ID
        # longer than a line arrives folded (its id grows with the row's pk). Read one
        # with message_id(): the unfolded value keeps the fold's leading space.
        message = message_from_bytes(envelope.content, policy=policy.default)
        self.received.append(message)
        if not self._held.is_set():
            self.waiting.release()
            await asyncio.get_running_loop().run_in_executor(None, self._held.wait, 60)
        if self.drop:
            server.transport.close()  # no answer: the client cannot know
            return ACCEPTED
        if self.answer.startswith("250"):
            self.messages.append(message)
            self.recipients.append(list(envelope.rcpt_tos))
        return self.answer


def message_id(message) -> str:
    """A received message's Message-ID as the sender wrote it.

    Django folds a header longer than 78 characters, and a Message-ID of
    ``<reporter-{pk}-{uuid}@{domain}>`` is longer from a five-digit pk on a short domain:
    ``Message-ID:`` ends the first line and the id starts the next with a space. The space
    is folding white space, no part of the id (RFC 5322, 3.6.4), but the ``email``
    package's unfolded value keeps it.
    """
    return str(message["Message-ID"]).strip()


class MailServer:
    """aiosmtpd with a ``Mailbox``, on a free loopback port; ``stop()`` when done."""

    def __init__(self):
        self.mailbox = Mailbox()
        self.controller = Controller(self.mailbox, hostname=LOOPBACK, port=free_port())

    @property
    def url(self) -> str:
        return f"smtp://{self.controller.hostname}:{self.controller.port}"

    def start(self) -> "MailServer":
        self.controller.start()
        return self

    def stop(self) -> None:
        self.mailbox.release()
        self.controller.stop()
