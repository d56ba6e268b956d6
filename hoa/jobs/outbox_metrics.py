"""The reporters' outbox as Prometheus sees it, computed from the database at each scrape.

``hoa_reporter_outbox_oldest_unsent_seconds``: how long the oldest email not yet handed to
the mail server (queued, retrying, or claimed by a sender) has waited, 0 when none has.
deploy/prometheus/alerts.yml alerts when it passes an hour: the sender is not running, or
the mail server has refused it for that long. ``hoa_reporter_outbox_emails{state}``: the
emails in each state, ``unknown`` (handed over, no answer: perhaps sent, never again) and
``failed`` included.

The sender runs from cron and ends; every gunicorn worker would count the same rows: a
collector that ``hoa.ops.metrics_view`` runs once per scrape (one query).
"""

import logging

from django.db import DatabaseError
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from hoa.models import ReporterEmail

logger = logging.getLogger(__name__)

OLDEST_UNSENT = "hoa_reporter_outbox_oldest_unsent_seconds"
EMAILS = "hoa_reporter_outbox_emails"


def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    return (
        GaugeMetricFamily(
            OLDEST_UNSENT,
            "Seconds the oldest reporter email not yet handed to the mail server has waited "
            "(0: none waits).",
        ),
        GaugeMetricFamily(EMAILS, "Reporter emails in the outbox, by state.", labels=["state"]),
    )


class ReporterOutboxCollector:
    """The outbox's oldest unsent email and its counts, read when scraped."""

    def describe(self):
        return list(_families())

    def collect(self):
        oldest, emails = _families()
        try:
            states = ReporterEmail.objects.order_by().values_list("state")
            rows = list(states.annotate(n=Count("id"), first=Min("created_at")))
        except DatabaseError:
            logger.warning("outbox metrics: the database did not answer", exc_info=True)
            return []
        counts = {state: n for state, n, _first in rows}
        unsent = [first for state, _n, first in rows if state in ReporterEmail.UNSENT]
        waited = (timezone.now() - min(unsent)).total_seconds() if unsent else 0.0
        oldest.add_metric([], max(waited, 0.0))
        for state in ReporterEmail.State:
            emails.add_metric([state.value], counts.get(state.value, 0))
        return [oldest, emails]
