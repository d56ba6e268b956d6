"""The month start as Prometheus sees it, computed from the database at each scrape.

``charges_month_start_organizations{state}`` counts the associations by the state of the
run of *their own* current month (each in its time zone, as ``--all-orgs`` bills it):
``completed``, ``pending`` (a run started and not completed: running now, or left by a
holder that died) or ``not_started``. ``charges_month_start_deadline_day`` is
``CHARGES_MONTH_START_DEADLINE_DAY``, the day of the month by which all must be completed;
deploy/prometheus/alerts.yml alerts when that day has come and some are not.

The cron process that bills the month ends when it is done and cannot hold a gauge, and
every gunicorn worker would count the same rows: so this is a collector that
``hoa.ops.metrics_view`` runs once per scrape (two small queries).
"""

import logging

from django.conf import settings
from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily

from charges.selectors import MonthStartState, month_start_states

logger = logging.getLogger(__name__)

ORGANIZATIONS = "charges_month_start_organizations"
DEADLINE_DAY = "charges_month_start_deadline_day"


def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    return (
        GaugeMetricFamily(
            ORGANIZATIONS,
            "Associations by the state of their current month's charge run (each in its own "
            "time zone): completed, pending (started, not completed), not_started.",
            labels=["state"],
        ),
        GaugeMetricFamily(
            DEADLINE_DAY,
            "CHARGES_MONTH_START_DEADLINE_DAY: the day of the month by which every "
            "association's month start must be completed.",
        ),
    )


class MonthStartCollector:
    """Counts of the current month start, read from the database when scraped."""

    def describe(self):
        return list(_families())

    def collect(self):
        organizations, deadline = _families()
        deadline.add_metric([], settings.CHARGES_MONTH_START_DEADLINE_DAY)
        try:
            counts = month_start_states()
        except DatabaseError:
            # /metrics still serves the counters; the gap in this series is what shows.
            logger.warning("month start metrics: the database did not answer", exc_info=True)
            return [deadline]
        for state in MonthStartState:
            organizations.add_metric([state.value], counts[state])
        return [organizations, deadline]
