"""The one test harness: every helper the suite, the topology tests and the fault suite share.

- ``waiting``: ``wait_until``, for the other side's progress (never a sleep that hopes);
- ``net``: loopback ports (free, closed) and ``TcpProxy``, a bad network on demand;
- ``http``: ``HttpStub``, a real local HTTP server standing in for the external endpoints;
- ``processes``: the processes a test starts (redis-server, a PostgreSQL cluster, gunicorn,
  ``manage.py`` and other Python children), and how they are frozen and stopped, by PID;
- ``layout``: ``layout_problems(page)``, what a page drawn in Chromium does to its reader
  (text over text, crushed cells, overflow, words split across lines);
- ``registry``: ``operations_removed``, the fenced-operation registry without some
  operations for a while (restored on exit);
- ``smtp``: ``MailServer``, a real local SMTP server (aiosmtpd) and the ``Mailbox`` that
  keeps what it was sent.

Benchmarks (``bench/``) import nothing from here: they keep their own few lines of set-up.
"""


class HarnessError(RuntimeError):
    """The harness could not set up or drive what a test asked for (not a finding)."""
