"""``{% sla_state complaint %}``: a complaint's SLA as of the moment the page is rendered.

The SLA sweep records breaches once a minute (or whenever cron runs it); what a page shows
is computed from ``sla_due_at`` when it is rendered, so a complaint three hours late reads
"overdue by 3 hours" even if no sweep has run since.
"""

from django import template
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

register = template.Library()


@register.inclusion_tag("hoa/_sla_state.html")
def sla_state(complaint, depth: int = 1):
    now = timezone.now()
    late = complaint.overdue_by(now)
    state = {"complaint": complaint, "running": complaint.is_open and complaint.sla_due_at}
    if late is not None:
        state.update(overdue=True, by=timesince(complaint.sla_due_at, now, depth=depth))
    elif state["running"]:
        state.update(left=timeuntil(complaint.sla_due_at, now, depth=depth))
    return state
