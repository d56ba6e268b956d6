"""Answer a lost database with a clear 503 instead of a 500."""

import logging

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse
from django.template.loader import render_to_string

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 30


class DatabaseUnavailableMiddleware:
    """Turn "PostgreSQL went away" into a 503 with Retry-After.

    The request's transaction was rolled back with the connection, so nothing was half
    written; the caller may simply try again. The page is rendered without the site
    layout, which would read the session (and so the database) again.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        logger.error("database unavailable", extra={"path": request.path, "error": str(exception)})
        response = HttpResponse(render_to_string("hoa/unavailable.html"), status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
