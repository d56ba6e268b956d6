"""The resolver itself (``hoa.tenancy``): what it answers, whom it notes as staff, what it
records. mallory is staff of Oak Ridge only."""

import pytest

from hoa.models import AccessDenial, Complaint, Organization
from hoa.models.organizations import staff_of
from hoa.tenancy import OutsideTenancy, organizations_for, row_for

pytestmark = pytest.mark.django_db

TENANT = AccessDenial.Reason.TENANT


def test_only_the_resolver_notes_who_is_staff_of_what(maple, oak, mallory):
    # The model asks (a query); it offers no way to be told who is staff ("trust me").
    assert [name for name in dir(Organization) if "staff" in name] == ["has_staff"]

    with pytest.raises(OutsideTenancy):
        organizations_for(mallory, slug="maple-court")
    assert staff_of(mallory) == set()
    assert organizations_for(mallory, every=True) == [oak]
    assert staff_of(mallory) == {oak.pk}
    assert maple.has_staff(mallory) is False


def test_the_resolver_answers_the_operator_at_the_shell_every_association(maple, oak):
    assert organizations_for(None, every=True) == sorted([maple, oak], key=lambda o: o.pk)
    assert organizations_for(None, slug="oak-ridge") == [oak]
    with pytest.raises(OutsideTenancy):
        organizations_for(None, slug="no-such-org")
    assert AccessDenial.objects.count() == 0  # a typo is not an attempt on anyone


def test_a_row_of_another_association_is_refused_like_one_that_does_not_exist(maple, mallory):
    complaint = Complaint.objects.create(organization=maple, title="Leak")

    with pytest.raises(OutsideTenancy) as elsewhere:
        row_for(mallory, Complaint.objects.all(), complaint.pk, what="complaint")
    with pytest.raises(OutsideTenancy) as missing:
        row_for(mallory, Complaint.objects.all(), 10**12, what="complaint")

    assert str(elsewhere.value) == f"No complaint with id {complaint.pk} for mallory."
    assert str(missing.value) == f"No complaint with id {10**12} for mallory."
    assert AccessDenial.objects.filter(reason=TENANT).count() == 1  # only the real attempt
