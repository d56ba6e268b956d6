"""The Prometheus scrape endpoint, ``GET /metrics``, for the monitoring system only.

Allowed: a request carrying ``Authorization: Bearer <METRICS_TOKEN>``, or one from an
address in ``METRICS_ALLOWED_IPS`` (loopback by default) that did not come through a
proxy. A request relayed by a reverse proxy on the same host arrives from loopback too;
its ``X-Forwarded-For`` header is what gives it away, so such a request needs the token.

What it serves: the process's counters (every gunicorn worker's, added up, in multiprocess
mode) and the samples of the *scrape-time* collectors apps register with
``register_scrape_collector`` from their ``AppConfig.ready()``: numbers computed from the
database when scraped (a cron process that ends cannot hold a gauge, and every worker
would report the same rows), served once per scrape.
"""

import hmac
import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpResponse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from hoa.security.audit import client_ip
from hoa.security.permissions import allow_methods

# Collectors whose ``collect()`` reads the database at scrape time; each needs a
# ``describe()`` (naming its families without reading anything) so that registering it
# from ``ready()`` runs no query.
SCRAPE_TIME = CollectorRegistry(auto_describe=False)
_scrape_collectors: set[type] = set()


def register_scrape_collector(collector) -> None:
    """Serve ``collector``'s samples on ``/metrics``, computed at each scrape (once per class)."""
    if type(collector) in _scrape_collectors:
        return
    SCRAPE_TIME.register(collector)
    _scrape_collectors.add(type(collector))


@lru_cache(maxsize=4)
def _networks(
    entries: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def _from_allowed_address(request) -> bool:
    if "HTTP_X_FORWARDED_FOR" in request.META or "HTTP_FORWARDED" in request.META:
        return False
    try:
        address = ipaddress.ip_address(client_ip(request) or "")
    except ValueError:
        return False
    return any(address in network for network in _networks(tuple(settings.METRICS_ALLOWED_IPS)))


def _bearer_token(request) -> str | None:
    scheme, _sep, credentials = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


def _registry():
    if not settings.PROMETHEUS_MULTIPROC_DIR:
        return REGISTRY
    # Several worker processes: add up the samples every worker wrote to the directory.
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=settings.PROMETHEUS_MULTIPROC_DIR)
    return registry


def _exposition() -> bytes:
    return generate_latest(_registry()) + generate_latest(SCRAPE_TIME)


def _refused(status: int) -> HttpResponse:
    response = HttpResponse(
        _("Metrics are served to the monitoring system only.") + "\n",
        status=status,
        content_type="text/plain; charset=utf-8",
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


@never_cache
@allow_methods("GET", "HEAD")
def metrics(request):
    """Expose the Prometheus metrics to an allowed scraper; 401/403 to anyone else."""
    expected = settings.METRICS_TOKEN
    presented = _bearer_token(request)
    if presented is not None:
        if expected and hmac.compare_digest(presented.encode(), expected.encode()):
            return HttpResponse(_exposition(), content_type=CONTENT_TYPE_LATEST)
        return _refused(401 if expected else 403)
    if _from_allowed_address(request):
        return HttpResponse(_exposition(), content_type=CONTENT_TYPE_LATEST)
    return _refused(401 if expected else 403)
