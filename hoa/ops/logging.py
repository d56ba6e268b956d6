"""JSON log lines for log shippers (``LOG_FORMAT=json``).

One object per line: time, level, logger, message, process id, and every ``extra=`` field
the call passed (``resource``, ``token``, ``outcome``, ``actor``…), so a log search can
follow one resource or one fencing token across hosts without parsing prose.
"""

import json
import logging
from datetime import UTC, datetime

# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
}


class JsonFormatter(logging.Formatter):
    """Format a record as one line of JSON, ``extra=`` fields included."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRIBUTES and not name.startswith("_"):
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: an extra that JSON cannot hold (a request, a datetime) is still logged.
        return json.dumps(entry, default=str, ensure_ascii=False)


class TracebacksOnlyForServerErrors(logging.Filter):
    """Write a refused request (4xx) as its one line, without the exception's traceback.

    Django logs a 403 or a 400 with the exception that caused it (``exc_info``), so every
    refusal printed a traceback that says nothing an operator acts on. Records carrying a
    ``status_code`` below 500 lose their ``exc_info``; 5xx and every other record keep it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
