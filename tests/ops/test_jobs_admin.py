"""SLA and publish state in the Django admin, as alice (staff of Maple Court) sees them."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from hoa.admin import humanize_due_in
from hoa.models import Complaint, Notice

pytestmark = pytest.mark.django_db

COMPLAINTS = reverse("admin:hoa_complaint_changelist")
NOTICES = reverse("admin:hoa_notice_changelist")


def listed(response) -> set[str]:
    return {str(obj) for obj in response.context["cl"].result_list}


def test_due_in_reads_as_time_left_or_how_long_overdue():
    now = timezone.now()
    assert humanize_due_in(now + timedelta(hours=3, minutes=5), now) == "3\xa0hours, 5\xa0minutes"
    assert humanize_due_in(now - timedelta(days=2, hours=1), now) == (
        "overdue by 2\xa0days, 1\xa0hour"
    )


def test_breached_filter_and_due_in_column_on_the_complaint_list(client, alice, maple, oak):
    now = timezone.now()
    breached = Complaint.objects.create(
        organization=maple,
        title="Breached leak",
        sla_due_at=now - timedelta(days=2, hours=1),
        sla_breached_at=now - timedelta(days=2),
    )
    on_time = Complaint.objects.create(
        organization=maple,
        title="On time",
        sla_due_at=now + timedelta(hours=5, minutes=30, seconds=45),
    )
    resolved = Complaint.objects.create(
        organization=maple, title="Resolved", status="resolved", sla_due_at=now
    )
    Complaint.objects.create(
        organization=oak, title="Other association", sla_breached_at=now, sla_due_at=now
    )
    client.force_login(alice)

    yes = client.get(COMPLAINTS, {"breached": "yes"})
    no = client.get(COMPLAINTS, {"breached": "no"})

    assert yes.status_code == no.status_code == 200
    assert listed(yes) == {str(breached)}
    assert listed(no) == {str(on_time), str(resolved)}
    rows = {
        str(complaint): complaint for complaint in client.get(COMPLAINTS).context["cl"].result_list
    }
    assert set(rows) == {str(breached), str(on_time), str(resolved)}
    page = client.get(COMPLAINTS).content.decode()
    assert "> overdue by 2\xa0days, 1\xa0hour</span></td>" in page
    assert '<td class="field-sla">due in 5\xa0hours, 30\xa0minutes</td>' in page
    assert '<td class="field-sla">-</td>' in page  # resolved: no clock running


def test_publish_state_column_and_filter_on_the_notice_list(client, alice, maple):
    now = timezone.now()
    scheduled = Notice.objects.create(
        organization=maple, title="Scheduled one", publish_at=now + timedelta(days=1)
    )
    due = Notice.objects.create(
        organization=maple, title="Due one", publish_at=now - timedelta(minutes=1)
    )
    published = Notice.objects.create(
        organization=maple, title="Published one", publish_at=now, published_at=now
    )
    delivered = Notice.objects.create(
        organization=maple,
        title="Delivered one",
        publish_at=now,
        published_at=now,
        delivered_at=now,
    )
    client.force_login(alice)

    by_state = {
        state: listed(client.get(NOTICES, {"state": state}))
        for state in ("scheduled", "due", "published", "delivered")
    }
    page = client.get(NOTICES).content.decode()

    assert by_state == {
        "scheduled": {str(scheduled)},
        "due": {str(due)},
        "published": {str(published)},
        "delivered": {str(delivered)},
    }
    for label in ("Scheduled", "Due (awaiting the publisher)", "Published, not yet delivered"):
        assert f'<td class="field-publish_state">{label}</td>' in page
    assert '<td class="field-publish_state">Delivered</td>' in page
