"""A real SMTP server for the tests that send mail: aiosmtpd on a free loopback port.

``Mailbox`` is its handler: it keeps every message it accepted.
"""

from email import message_from_bytes
from email.message import Message

from aiosmtpd.controller import Controller

from tests.harness.net import LOOPBACK, free_port


class Mailbox:
    """aiosmtpd handler: keeps every message the server accepted."""

    def __init__(self):
        self.messages: list[Message] = []
        self.recipients: list[list[str]] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(message_from_bytes(envelope.content))
        self.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"


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
        self.controller.stop()
