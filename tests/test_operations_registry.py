"""The registry of fenced operations: a third operation needs no change in ``hoa``."""

import re
from datetime import timedelta

import pytest

from hoa import operations
from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LeaseRanOut,
    LockServiceDown,
    NotPermitted,
    Superseded,
)
from hoa.models import Organization
from hoa.operations import FencedOperation, Link, Panel, Refusals, ResourceInfo

pytestmark = pytest.mark.django_db

KEYS = re.compile(r"key-handover:org:(?P<org>[0-9]{1,18}):unit:(?P<unit>[0-9]{1,18})")


def _describe(matches):
    organizations = Organization.objects.in_bulk({int(m["org"]) for m in matches.values()})
    return {
        resource: ResourceInfo(
            resource=resource,
            organization=organizations.get(int(match["org"])),
            description=f"Keys of unit {match['unit']}",
        )
        for resource, match in matches.items()
    }


REFUSALS = Refusals(NotPermitted, Busy, Superseded, LeaseRanOut, LockServiceDown, CallFailed)


def _operation(**declared) -> FencedOperation:
    return FencedOperation(
        permission="hoa.change_unit",
        example="key-handover:org:1:unit:1",
        refusals=REFUSALS,
        ttl=timedelta(seconds=5),
        **declared,
    )


@pytest.fixture
def keys_operation():
    operation = _operation(
        name="key-handover",
        resource=KEYS,
        describe=_describe,
        scan_prefixes=lambda ids: [f"key-handover:org:{pk}:" for pk in ids],
        links=(Link("Keys", "hoa:dashboard", order=99),),
        dashboard=Panel(context=lambda request, organization: {"keys_waiting": 3}),
    )
    operations.register(operation)
    yield operation
    operations.unregister(operation.name)


def test_both_apps_register_their_operation():
    names = [operation.name for operation in operations.operations()]
    assert names == ["vendor-assignment", "monthly-charges"]  # their dashboard order


def test_a_third_operation_is_described_scanned_and_linked(keys_operation, maple, client, alice):
    resource = f"key-handover:org:{maple.pk}:unit:7"
    described = operations.describe_resources([resource, "unknown:thing"])
    assert described[resource].organization == maple
    assert described[resource].description == "Keys of unit 7"
    assert described["unknown:thing"] == ResourceInfo(resource="unknown:thing")
    assert f"key-handover:org:{maple.pk}:" in operations.scan_prefixes([maple.pk])

    client.force_login(alice)
    page = client.get(f"/orgs/{maple.slug}/").content.decode()
    assert ">Keys</a>" in page  # its navigation link, from the context processor


def test_a_name_is_registered_once(keys_operation):
    with pytest.raises(ValueError, match="already registered"):
        operations.register(_operation(name="key-handover", resource=KEYS, describe=_describe))
