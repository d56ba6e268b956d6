"""``{% sla_state complaint %}``: a complaint's SLA as of the moment the page is rendered.

The SLA sweep records breaches once a minute (or whenever cron runs it); what a page shows
is computed from ``sla_due_at`` when it is rendered, so a complaint three hours late reads
"overdue by 3 hours" even if no sweep has run since.

Built here rather than from a template of its own: the complaint list and the dashboard
show it on every row, and rendering a template per row cost more than the rest of the row.
"""

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext

from hoa import dates

register = template.Library()


@register.simple_tag
def sla_state(complaint, depth: int = 1):
    now = timezone.now()
    late = complaint.overdue_by(now)
    if late is not None:
        by = timesince(complaint.sla_due_at, now, depth=depth)
        state = format_html(
            '<span class="badge bad" data-sla="overdue">{}</span>',
            gettext("overdue by %(by)s") % {"by": by},
        )
    elif complaint.is_open and complaint.sla_due_at:
        left = timeuntil(complaint.sla_due_at, now, depth=depth)
        state = format_html(
            '<span data-sla="due">{}</span>', gettext("due in %(left)s") % {"left": left}
        )
        if complaint.is_breached:
            state += format_html(
                ' <span class="badge bad" data-sla="breached">{}</span>', gettext("breach recorded")
            )
    else:
        state = format_html(
            '<span class="muted" data-sla="stopped">{}</span>', gettext("no SLA running")
        )
    title = f"{gettext('SLA due')} {dates.when(complaint.sla_due_at)}"
    return format_html('<span class="sla" title="{}">{}</span>', title, state)
