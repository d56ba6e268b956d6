from datetime import timedelta

import pytest
from django.db import transaction

from hoa.models import Complaint
from locking import FenceLock, LockHeld, StaleFencingToken, advance_fence


@pytest.mark.django_db(transaction=True)
def test_grant_fence_and_stale_rejection(maple):
    lock = FenceLock()
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    first = lock.acquire("vendor-assignment:complaint:1", ttl=timedelta(seconds=5))
    with pytest.raises(LockHeld):
        lock.acquire("vendor-assignment:complaint:1", ttl=timedelta(seconds=5))
    assert first.release() is True
    second = lock.acquire("vendor-assignment:complaint:1", ttl=timedelta(seconds=5))
    assert second.token == first.token + 1
    with transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=complaint.pk), second.token)
    with pytest.raises(StaleFencingToken), transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=complaint.pk), first.token)
    second.release()
