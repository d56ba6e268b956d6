"""``manage.py pay_approved_invoices`` as cron runs it: child processes, exit codes, one line
on stderr per refusal, quiet on success; and paused payers frozen with SIGSTOP."""

import getpass
import re
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.utils import timezone

from hoa.management.base import EXIT_TEMPFAIL
from hoa.operations import operations
from locking import FenceLock
from locking.keys import lock_key
from tests.harness.net import TcpProxy
from tests.harness.processes import freeze, run_manage, start_manage, stop_process, thaw
from tests.harness.waiting import wait_until
from tests.invoices_support import (
    approve,
    assignment_of,
    paid_keys,
    paid_state,
    payment_calls,
    payment_events,
    record,
)
from tests.vendors_support import Worker, active_vendor, uninsured_vendor
from vendors.models import Invoice, VendorPayment
from vendors.operations import payment_resource
from vendors.payment_client import PAYMENT_ENDPOINT, idempotency_key
from vendors.payments import pay_invoice

pytestmark = pytest.mark.django_db(transaction=True)

COMMAND = "pay_approved_invoices"
OS_USER = getpass.getuser()
Status = Invoice.Status
# The acquire script's reply when it granted the lease (tests/faults/scenario.py's GRANTED).
GRANTED = b"*4\r\n:1\r\n"


@pytest.fixture
def env(subprocess_env, payments):
    # LOG_LEVEL=ERROR keeps the INFO logs of a success off stderr: a refusal is one line.
    return {
        **subprocess_env,
        "VENDOR_PAYMENT_URL": payments.url_for(PAYMENT_ENDPOINT),
        "LOG_LEVEL": "ERROR",
    }


def wait_for_lease_to_expire(redis_client, invoice) -> None:
    key = lock_key(payment_resource(invoice.pk))
    wait_until(lambda: not redis_client.exists(key), what="the payment lease to expire")


def test_pays_one_invoice_and_says_so_in_one_line_then_already_paid(approved, env, payments):
    first = run_manage(COMMAND, "--invoice", approved.pk, env=env)
    second = run_manage(COMMAND, "--invoice", approved.pk, env=env)

    reference = VendorPayment.objects.get().reference
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == (
        f"Paid Pipe Pros $250.00 for invoice #{approved.pk} (reference {reference}) (token 1).\n"
    )
    assert (second.returncode, second.stderr) == (0, "")
    assert second.stdout == (
        f"Invoice #{approved.pk} was already paid: Pipe Pros, $250.00 (reference {reference}).\n"
    )
    # The second attempt's fence (token 2) ran before it found the payment.
    assert paid_state(approved) == (Status.PAID, 1, 2, [(1, reference)])
    assert paid_keys(payments) == [(idempotency_key(approved.pk), 1)]
    assert VendorPayment.objects.get().actor_label == f"cli:{OS_USER}"


def test_bad_input_exits_1_with_one_line_and_pays_nothing(
    approved, assignment, alice, mallory, env, payments
):
    received = record(assignment, alice, number="NOT-YET", amount=Decimal("12.00"))
    cases = {
        ("--invoice", "twelve"): "--invoice must be a positive whole number, got 'twelve'.",
        ("--invoice", "999999"): "No invoice with id 999999.",
        ("--invoice", str(received.pk)): (
            "Only an approved invoice can be paid; this one is received."
        ),
        ("--org", "no-such-org"): 'Unknown organization "no-such-org".',
        ("--all-orgs", "--due-within", "-1"): (
            "--due-within must be a whole number of days from 0 to 366, got '-1'."
        ),
        ("--all-orgs", "--actor", "ghost"): 'No active user "ghost".',
        ("--invoice", str(approved.pk), "--actor", "mallory"): (
            f"No invoice with id {approved.pk} for mallory."
        ),
        ("--org", "maple-court", "--actor", "mallory"): (
            'No organization "maple-court" for mallory.'
        ),
    }
    for args, line in cases.items():
        done = run_manage(COMMAND, *args, env=env)
        assert (done.returncode, done.stdout) == (1, ""), args
        assert done.stderr == f"CommandError: {line}\n", args
    missing = run_manage(COMMAND, env=env)
    assert missing.returncode == 1 and len(missing.stderr.splitlines()) == 1
    assert payments.received == []
    assert not VendorPayment.objects.exists()


def test_no_payment_service_exits_1_and_pays_nothing(approved, env, payments):
    done = run_manage(COMMAND, "--invoice", approved.pk, env={**env, "VENDOR_PAYMENT_URL": ""})

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "CommandError: No payment service is configured (VENDOR_PAYMENT_URL), so invoice "
        f"#{approved.pk} was not paid; nothing was saved.\n"
    )
    assert paid_state(approved) == (Status.APPROVED, None, 0, [])


def test_no_payment_service_stops_a_batch_at_once_even_with_nothing_due(maple, env):
    """docs/operations.md: a run that could pay nothing says so, whether or not anything is
    due tonight (it used to exit 0 until the first invoice fell due)."""
    done = run_manage(COMMAND, "--all-orgs", env={**env, "VENDOR_PAYMENT_URL": ""})

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "CommandError: No payment service is configured (VENDOR_PAYMENT_URL); nothing was paid.\n"
    )


def test_an_unsigned_409_is_the_service_refusing_not_a_newer_payment(approved, env, payments):
    """A payment service that answers a plain 409 (not locking's signed answer naming the
    call) said no and named no newer payment: refused (exit 1, nothing paid), never "a
    newer payment (token None) took over"."""
    payments.status = 409
    done = run_manage(COMMAND, "--invoice", approved.pk, env=env)

    assert done.returncode == 1
    assert "None" not in done.stderr and "took over" not in done.stderr
    assert "HTTP 409" in done.stderr and len(done.stderr.splitlines()) == 1
    assert paid_state(approved)[0] == Status.APPROVED


def test_a_busy_invoice_exits_75_naming_the_holder(approved, env, payments):
    FenceLock().acquire(
        payment_resource(approved.pk), ttl=timedelta(seconds=30), holder="bob at the desk"
    )
    done = run_manage(COMMAND, "--invoice", approved.pk, env=env)

    assert (done.returncode, done.stdout) == (EXIT_TEMPFAIL, "")
    [line] = done.stderr.splitlines()
    assert line.startswith("CommandError: Another holder (bob at the desk on ")
    assert f") is paying invoice #{approved.pk}; try again in " in line
    assert re.search(r"; try again in \d+ seconds\.$", line), line
    assert payments.received == []


# -- paused payers (SIGSTOP) ------------------------------------------------------------------


@pytest.mark.slow
def test_a_payer_frozen_after_its_grant_is_refused_when_woken_and_never_calls(
    approved, env, payments, redis_client, settings
):
    """The command is granted token 1 and frozen before it reads the grant (the Redis
    proxy keeps the reply back until the process is stopped). Its lease runs out; another
    payer pays with token 2. Woken, the command finds the newer token recorded and stops:
    exit 75, and the payment service heard one call, the newer payer's."""
    url = urlsplit(settings.LOCK_REDIS_URL)
    proxy = TcpProxy(url.port, name="lock-redis").start()
    resource = payment_resource(approved.pk).encode()
    grant = proxy.tap(b"lock:{" + resource + b"}", reply_prefix=GRANTED, hold=True)
    proxied = urlunsplit(url._replace(netloc=f"127.0.0.1:{proxy.port}"))
    child_env = {**env, "LOCK_REDIS_URL": proxied, "VENDOR_PAYMENT_LOCK_TTL_SECONDS": "0.5"}
    payer = start_manage(COMMAND, "--invoice", approved.pk, "--skip-checks", env=child_env)
    try:
        grant.wait_arrived(60)  # Redis granted token 1; the reply waits in the proxy
        freeze(payer.pid)
        grant.release()  # the reply reaches a process that cannot read it yet
        wait_for_lease_to_expire(redis_client, approved)
        newer = pay_invoice(invoice=approved, actor=None, via="holder-b")
        thaw(payer.pid)
        stdout, stderr = payer.communicate(timeout=60)
    finally:
        thaw(payer.pid)
        stop_process(payer)
        proxy.stop()

    assert (newer.outcome, newer.token) == ("committed", 2)
    assert (payer.returncode, stdout) == (EXIT_TEMPFAIL, "")
    assert stderr == (
        f"CommandError: A newer holder (token 2) took over paying invoice #{approved.pk} while "
        "this attempt (token 1) was paused past its lease; nothing of this attempt was "
        "written.\n"
    )
    assert payment_calls(payments) == [(2, 200, "accepted")]  # the service was told once
    assert paid_keys(payments) == [(idempotency_key(approved.pk), 2)]
    assert paid_state(approved)[:3] == (Status.PAID, 2, 2)
    assert payment_events(approved) == [("committed", 2), ("stale", 1)]


@pytest.mark.slow
def test_a_payer_whose_lease_was_lost_is_stopped_by_a_newer_claim_before_it_calls(
    approved, env, payments, redis_client, settings
):
    """Frozen before it read its grant (token 1, a long lease by its own clock), the command
    loses its lease in Redis (the key is gone, as after a failover). A newer payer (token 2)
    claims the invoice and is inside its own call, not yet committed, when the command is
    woken: its lease still looks good to it and the fence has not moved, so only the claim
    can stop it. Its claim finds the newer one and it exits 75 before calling; the newer
    payer pays. The service heard one call."""
    url = urlsplit(settings.LOCK_REDIS_URL)
    proxy = TcpProxy(url.port, name="lock-redis").start()
    resource = payment_resource(approved.pk)
    grant = proxy.tap(b"lock:{" + resource.encode() + b"}", reply_prefix=GRANTED, hold=True)
    proxied = urlunsplit(url._replace(netloc=f"127.0.0.1:{proxy.port}"))
    child_env = {**env, "LOCK_REDIS_URL": proxied, "VENDOR_PAYMENT_LOCK_TTL_SECONDS": "120"}
    newer_call = payments.hold(lambda request: request.token == 2)
    payer = start_manage(COMMAND, "--invoice", approved.pk, "--skip-checks", env=child_env)
    newer = Worker(lambda: pay_invoice(invoice=approved, actor=None, via="holder-b"))
    try:
        grant.wait_arrived(60)  # Redis granted token 1; the reply waits in the proxy
        freeze(payer.pid)
        grant.release()
        redis_client.delete(lock_key(resource))  # the lease is lost; the payer cannot know
        newer.start()
        newer_call.wait_arrived(1, timeout=60)  # B has claimed the invoice, is inside its call
        thaw(payer.pid)
        stdout, stderr = payer.communicate(timeout=60)
        newer_call.release()
        result = newer.outcome()
    finally:
        newer_call.release()
        thaw(payer.pid)
        stop_process(payer)
        proxy.stop()

    assert (payer.returncode, stdout) == (EXIT_TEMPFAIL, "")
    assert stderr.startswith(
        f"CommandError: A newer holder (token 2) took over paying invoice #{approved.pk} "
    )
    assert (result.outcome, result.token) == ("committed", 2)
    assert payment_calls(payments) == [(2, 200, "accepted")]  # the woken one never called
    assert paid_keys(payments) == [(idempotency_key(approved.pk), 2)]
    assert paid_state(approved)[:3] == (Status.PAID, 2, 2)
    assert payment_events(approved) == [("stale", 1), ("committed", 2)]


@pytest.mark.slow
def test_a_payer_frozen_inside_its_call_is_refused_and_money_leaves_once(
    approved, env, payments, redis_client
):
    """Frozen while the service's answer to its call (it paid) waits in its socket; the
    next payer's call gets that payment back, unpaid again, and is recorded; the frozen
    command is refused by the fence when woken."""
    gate = payments.hold(lambda request: request.token == 1)
    child_env = {**env, "VENDOR_PAYMENT_LOCK_TTL_SECONDS": "0.5"}
    payer = start_manage(COMMAND, "--invoice", approved.pk, "--skip-checks", env=child_env)
    try:
        gate.wait_arrived(1, timeout=60)  # token 1 is inside its payment call
        freeze(payer.pid)
        gate.release()  # the service pays it; the answer waits in a frozen process's socket
        wait_for_lease_to_expire(redis_client, approved)
        newer = pay_invoice(invoice=approved, actor=None, via="holder-b")
        thaw(payer.pid)
        stdout, stderr = payer.communicate(timeout=60)
    finally:
        gate.release()
        thaw(payer.pid)
        stop_process(payer)

    assert (newer.outcome, newer.token) == ("committed", 2)
    assert (payer.returncode, stdout) == (EXIT_TEMPFAIL, "")
    assert stderr.startswith(
        f"CommandError: A newer holder (token 2) took over paying invoice #{approved.pk} "
    )
    assert payment_calls(payments) == [(1, 200, "accepted"), (2, 200, "replaced")]
    assert paid_keys(payments) == [(idempotency_key(approved.pk), 1)]  # paid once
    [payment] = VendorPayment.objects.all()
    assert (payment.fence_token, payment.actor_label) == (2, "holder-b")
    assert payment_events(approved) == [("committed", 2), ("stale", 1)]


@pytest.mark.slow
def test_eight_payers_racing_one_pays_the_rest_exit_75(approved, env, payments):
    gate = payments.hold()  # the winner waits at the service until every loser has exited
    leases = {operation.ttl_setting: "240" for operation in operations() if operation.ttl_setting}
    racing_env = {**env, "EXTERNAL_CALL_TIMEOUT_SECONDS": "120", **leases}
    racers = [start_manage(COMMAND, "--invoice", approved.pk, env=racing_env) for _ in range(8)]
    try:
        gate.wait_arrived(1, timeout=60)
        wait_until(lambda: sum(p.poll() is not None for p in racers) == 7, timeout=60)
        gate.release()
        outputs = [p.communicate(timeout=60) for p in racers]
        answers = [(p.returncode, *output) for p, output in zip(racers, outputs, strict=True)]
    finally:
        for racer in racers:
            stop_process(racer)

    assert Counter(code for code, _, _ in answers) == {EXIT_TEMPFAIL: 7, 0: 1}
    for code, stdout, stderr in answers:
        if code:
            assert stderr.startswith("CommandError: Another holder (")
            assert f") is paying invoice #{approved.pk}; try again in " in stderr
        else:
            assert stdout.startswith("Paid Pipe Pros $250.00")
    assert len(payments.received) == 1 and len(payments.payments) == 1


# -- every association --------------------------------------------------------------------------


def approved_due(maple, vendor, alice, bob, *, number, due_in_days, amount="100.00"):
    today = timezone.localdate()
    invoice = record(
        assignment_of(maple, vendor, title=f"Work {number}"),
        alice,
        number=number,
        amount=Decimal(amount),
        issued_on=today - timedelta(days=10),
        due_on=today + timedelta(days=due_in_days),
    )
    return approve(invoice, bob)


def test_all_orgs_pays_the_due_invoices_once_quietly_and_the_rest_on_a_later_night(
    maple, oak, pipe, alice, bob, mallory, env, payments
):
    due = [
        approved_due(maple, pipe, alice, bob, number=f"D-{n}", due_in_days=-n, amount=f"{n}1.00")
        for n in range(3)
    ]
    later = approved_due(maple, pipe, alice, bob, number="L-1", due_in_days=5)
    not_approved = record(assignment_of(maple, pipe), alice, number="R-1", amount=Decimal("7.00"))

    quiet = run_manage(COMMAND, "--all-orgs", "-v", "0", env=env)
    again = run_manage(COMMAND, "--all-orgs", env=env)
    ahead = run_manage(COMMAND, "--all-orgs", "--due-within", "5", env=env)

    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert (again.returncode, again.stderr) == (0, "")
    assert (
        again.stdout
        == "0 invoices to pay: 0 paid, 0 already paid, 0 changed meanwhile, 0 failed.\n"
    )
    assert (
        ahead.stdout == "1 invoice to pay: 1 paid, 0 already paid, 0 changed meanwhile, 0 failed.\n"
    )
    for invoice in (*due, later):
        assert paid_state(invoice)[0] == Status.PAID
    assert paid_state(not_approved)[0] == Status.RECEIVED
    assert sorted(key for key, _ in paid_keys(payments)) == sorted(
        idempotency_key(invoice.pk) for invoice in (*due, later)
    )


def test_all_orgs_exits_1_naming_each_invoice_it_could_not_pay_and_pays_the_rest(
    maple, pipe, alice, bob, env, payments
):
    lapsed = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=1)
    paid = approved_due(maple, pipe, alice, bob, number="OK-1", due_in_days=0)
    # Approved before the certificate lapsed; it cannot be paid now.
    refused = approved_due(maple, lapsed, alice, bob, number="NO-1", due_in_days=0, amount="9.00")

    done = run_manage(COMMAND, "--all-orgs", env=env)

    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "maple-court: Bright Spark's insurance certificate with Maple Court lapsed on "
        f"{(timezone.localdate() - timedelta(days=1)).isoformat()}: record the new certificate "
        "on the vendor's contract before assigning or paying them.",
        "CommandError: 1 invoice could not be paid; see the lines above.",
    ]
    assert (
        done.stdout == "2 invoices to pay: 1 paid, 0 already paid, 0 changed meanwhile, 1 failed.\n"
    )
    assert paid_state(paid)[0] == Status.PAID
    assert paid_state(refused)[0] == Status.APPROVED


def test_all_orgs_exits_75_when_an_invoice_is_still_being_paid_elsewhere_at_the_deadline(
    maple, pipe, alice, bob, env, payments
):
    held = approved_due(maple, pipe, alice, bob, number="H-1", due_in_days=0)
    other = approved_due(maple, pipe, alice, bob, number="H-2", due_in_days=0, amount="55.00")
    FenceLock().acquire(payment_resource(held.pk), ttl=timedelta(seconds=30), holder="cron-b")

    done = run_manage(COMMAND, "--all-orgs", "--wait", "0", env=env)

    assert done.returncode == EXIT_TEMPFAIL
    assert done.stdout == (
        "2 invoices to pay: 1 paid, 0 already paid, 0 changed meanwhile, 0 failed, 1 unfinished.\n"
    )
    assert done.stderr == (
        "CommandError: 1 invoice was still being paid elsewhere after waiting 0 s; run again "
        "later to confirm.\n"
    )
    assert (paid_state(held)[0], paid_state(other)[0]) == (Status.APPROVED, Status.PAID)


def test_all_orgs_with_an_actor_pays_only_their_associations(
    maple, oak, pipe, alice, bob, env, payments
):
    mine = approved_due(maple, pipe, alice, bob, number="M-1", due_in_days=0)
    oak_vendor = active_vendor("Oak Pipes", oak)
    theirs = Invoice.objects.create(
        organization=oak,
        assignment=assignment_of(oak, oak_vendor),
        vendor=oak_vendor,
        number="O-1",
        amount=Decimal("40.00"),
        issued_on=timezone.localdate(),
        due_on=timezone.localdate(),
        status=Status.APPROVED,
    )

    done = run_manage(COMMAND, "--all-orgs", "--actor", "alice", env=env)

    assert (done.returncode, done.stderr) == (0, "")
    assert (paid_state(mine)[0], paid_state(theirs)[0]) == (Status.PAID, Status.APPROVED)
