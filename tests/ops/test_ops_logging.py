"""What the configured logging writes for a request: one line per event, in one format, and
a traceback only for a server error.

The tests read what the handlers of the real configuration (``hoa.settings.LOGGING``)
write: every handler a ``django.request`` record reaches, walking up the loggers while they
propagate, is pointed at one buffer for the test. A record handled twice (Django's own
console handler plus ours, as under ``make run``) shows up twice there.
"""

import io
import logging
import re
from contextlib import contextmanager

import pytest
from django.urls import path

from hoa.urls import handler404, handler500  # noqa: F401 - this module is a URLconf too
from hoa.urls import urlpatterns as site_patterns

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+ ")


def explode(request):
    raise RuntimeError("the test's own server error")


urlpatterns = [path("explode/", explode), *site_patterns]


def reached_handlers(logger_name: str) -> list[logging.StreamHandler]:
    """The stream handlers a record logged on ``logger_name`` is written by, in order
    (pytest's own capturing handlers on the root logger left out)."""
    handlers, logger = [], logging.getLogger(logger_name)
    while logger is not None:
        handlers += [
            handler
            for handler in logger.handlers
            if isinstance(handler, logging.StreamHandler)
            and not type(handler).__module__.startswith("_pytest")
        ]
        logger = logger.parent if logger.propagate else None
    return handlers


@contextmanager
def log_output(logger_name: str = "django.request"):
    """Everything the handlers reached from ``logger_name`` write, as one string buffer."""
    buffer = io.StringIO()
    handlers = reached_handlers(logger_name)
    previous = [handler.setStream(buffer) for handler in handlers]
    try:
        yield buffer
    finally:
        for handler, stream in zip(handlers, previous, strict=True):
            handler.setStream(stream)


def lines_about(output: str, path_: str) -> list[str]:
    return [line for line in output.splitlines() if path_ in line]


@pytest.fixture
def debug_on(settings):
    """``make run`` runs with DEBUG on: Django's default console handler only writes then."""
    settings.DEBUG = True


def test_a_403_is_one_line_in_the_sites_format_without_a_traceback(client, viewer, debug_on):
    client.force_login(viewer)
    url = "/orgs/maple-court/charges/2026-03/generate/"

    with log_output() as output:
        response = client.post(url)

    assert response.status_code == 403
    written = output.getvalue()
    assert "Traceback" not in written
    [line] = [line for line in lines_about(written, url) if "django.request" in line]
    assert LINE.match(line), line
    assert line.endswith(f"WARNING django.request Forbidden (Permission denied): {url}")
    # Every line is a record in the site's format: nothing in Django's bare default format.
    assert all(LINE.match(line) for line in written.splitlines()), written


def test_a_404_is_one_line_without_a_traceback(client, alice, debug_on):
    client.force_login(alice)
    url = "/orgs/no-such-association/"

    with log_output() as output:
        response = client.get(url)

    assert response.status_code == 404
    written = output.getvalue()
    assert "Traceback" not in written
    assert lines_about(written, url) == [
        line for line in written.splitlines() if line.endswith(f"Not Found: {url}")
    ]
    assert len(lines_about(written, url)) == 1, written


@pytest.mark.urls(__name__)
def test_a_500_keeps_its_traceback_once(client, debug_on, settings):
    settings.DEBUG = False  # the site's own 500 page; the logging is the same
    client.raise_request_exception = False

    with log_output() as output:
        response = client.get("/explode/")

    assert response.status_code == 500
    written = output.getvalue()
    assert written.count("Traceback (most recent call last)") == 1, written
    assert "RuntimeError: the test's own server error" in written
    [line] = [line for line in written.splitlines() if "Internal Server Error" in line]
    assert line.endswith("ERROR django.request Internal Server Error: /explode/")


def test_runservers_request_lines_are_written_by_the_sites_handler_only():
    site_handlers = reached_handlers("hoa")

    assert len(site_handlers) == 1
    assert reached_handlers("django.server") == site_handlers
    assert reached_handlers("django.request") == site_handlers
