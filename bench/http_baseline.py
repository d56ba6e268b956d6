"""The unfenced twins of the staff POSTs under ``PREFIX``: the real views and services without
the lease, fence and audit, or the status's compare-and-swap (docs/benchmarks.md)."""

import time
import types
from contextlib import nullcontext
from datetime import timedelta

from django.db import DEFAULT_DB_ALIAS, transaction
from django.urls import path
from django.utils import timezone

from charges import services as charge_services
from charges import views as charge_views
from charges.models import MonthlyChargeRun
from charges.operations import GENERATION
from hoa.complaints import views as complaint_views
from hoa.complaints import workflow
from hoa.fenced import Permitted
from hoa.models import Complaint, ComplaintEvent
from hoa.urls import handler400, handler403, handler404, handler500, urlpatterns  # noqa: F401
from locking import Lease, unfenced_writes
from vendors import invoice_views, payments, services, views
from vendors.operations import ASSIGNMENT, PAYMENT

PREFIX = "bench/unfenced/"


# The lease that never was: no lock in Redis (nothing releases or extends it), held for a
# day; the lock it names only says which database fences; its token, microseconds of the
# clock, rises call after call and no holder was granted it.
_NEVER_GRANTED = types.SimpleNamespace(using=DEFAULT_DB_ALIAS)
_A_DAY = timedelta(days=1)


def _unfenced_lease(resource: str) -> Lease:
    return Lease(
        resource=resource, token=time.time_ns() // 1000, owner="bench-unfenced", value="",
        lock=_NEVER_GRANTED, ttl=_A_DAY, started=time.monotonic(),
        expires_ms=time.time_ns() // 1_000_000 + _A_DAY // timedelta(milliseconds=1),
    )  # fmt: skip


class _UnfencedPermitted(Permitted):
    def run(self, steps):
        lease = _unfenced_lease(self.resource)
        found = steps.look(lease)
        receipt = _receipt(steps, lease, found) if found.needs_call else None
        with transaction.atomic():
            charges = isinstance(steps, charge_services.ChargeRun)
            if charges and found.run is None:  # a new month: its run, pending (the fenced
                # view inserts it completed, fenced, in one statement: ``create``)
                run = MonthlyChargeRun(organization=steps.organization, month=steps.month)
                MonthlyChargeRun.objects.bulk_create([run], ignore_conflicts=True)
            row = steps.fence_row(found)
            # The runs' table is strict (charges 0005): the twin says it writes unfenced,
            # which costs it two round trips the fenced view does not pay.
            with unfenced_writes() if charges else nullcontext():
                row.select_for_update().values_list("pk").get()
                return steps.commit(lease, found, receipt)


def _receipt(steps, lease, found):
    """The operation's own claim, if it makes one, committed on its own; then the call."""
    if steps.claim is not None and not transaction.atomic(steps.claim)(lease, found):
        return None
    return steps.call_outside(lease, found)


def _unfenced(operation):
    """``operation`` whose ``begin`` returns an ``_UnfencedPermitted`` after the same checks."""

    def begin(actor, **given) -> Permitted:
        return _UnfencedPermitted(**vars(operation.begin(actor, **given)))

    return types.SimpleNamespace(begin=begin)


def _rebound(function, **names):
    """``function`` (its code, defaults and closure) reading ``names`` as its globals."""
    rebound = types.FunctionType(
        function.__code__, {**function.__globals__, **names}, function.__name__,
        function.__defaults__, function.__closure__,
    )  # fmt: skip
    rebound.__kwdefaults__ = function.__kwdefaults__
    return rebound


assign_unfenced = _rebound(services.assign_vendor, ASSIGNMENT=_unfenced(ASSIGNMENT))
_generation_unfenced = _rebound(charge_services._generation, GENERATION=_unfenced(GENERATION))
generate_unfenced = _rebound(
    charge_services.generate_monthly_charges, _generation=_generation_unfenced
)
_payment_unfenced = _rebound(payments._payment, PAYMENT=_unfenced(PAYMENT))
pay_unfenced = _rebound(payments.pay_invoice, _payment=_payment_unfenced)


def change_status_unserialized(*, complaint, seen, to, note, actor, assigned):
    """``workflow.change_status`` without its compare-and-swap: the update by primary key."""
    note = note.strip()
    lands_on = workflow.check_transition(complaint=complaint, seen=seen, to=to, note=note,
                                         assigned=assigned)  # fmt: skip
    now, closing = timezone.now(), lands_on == Complaint.Status.CLOSED
    with transaction.atomic():
        Complaint.objects.filter(pk=complaint.pk).update(
            status=lands_on, closed_at=now if closing else None,
            closed_by=actor if closing else None,
        )  # fmt: skip
        event = ComplaintEvent.objects.create(
            complaint=complaint, kind=ComplaintEvent.Kind.STATUS_CHANGED, from_status=seen,
            to_status=lands_on, detail=note, actor=actor, actor_label=actor.get_username(),
            at=now,
        )  # fmt: skip
    complaint.status = lands_on
    return workflow.StatusChange(complaint=complaint, seen=seen, to=lands_on, event=event)


class UnfencedAssignView(views.AssignVendorView):
    post = _rebound(views.AssignVendorView.post, assign_vendor=assign_unfenced)


class UnfencedPayView(invoice_views.PayInvoiceView):
    change = _rebound(invoice_views.PayInvoiceView.change, pay_invoice=pay_unfenced)


class UnfencedGenerateView(charge_views.GenerateChargesView):
    run = _rebound(charge_views.GenerateChargesView.run, generate_monthly_charges=generate_unfenced)


_unserialized = types.SimpleNamespace(**{n: getattr(workflow, n) for n in workflow.__all__})
_unserialized.change_status = change_status_unserialized


class UnserializedStatusView(complaint_views.ChangeStatusView):
    apply = _rebound(complaint_views.ChangeStatusView.apply, workflow=_unserialized)


ORG = PREFIX + "orgs/<slug:org_slug>/"  # the real ones' paths, under PREFIX
urlpatterns = [
    *urlpatterns,
    path(f"{ORG}complaints/<int:pk>/assign/", UnfencedAssignView.as_view()),
    path(f"{ORG}charges/<str:month>/generate/", UnfencedGenerateView.as_view()),
    path(f"{ORG}complaints/<int:pk>/status/", UnserializedStatusView.as_view()),
    path(f"{ORG}invoices/<id:pk>/pay/", UnfencedPayView.as_view()),
]
