"""Section 5: the staff assign endpoint under gunicorn, many logged-in clients at once.

gunicorn (``gunicorn.conf.py``, 2 sync workers, ``DEBUG=0``, ``bench.http_settings``) and
a stand-in vendor dispatch; ``clients`` logged-in sessions POST for ``seconds``, half to a
few *hot* complaints (``reassign`` on: holders collide, losers get 409), half to a new
*cold* one each (303), at the real endpoint (``assign``) or at it without lease, fence and
audit (``baseline``, ``bench.http_baseline``). Reported: requests/s, server CPU per request.
Checked: no 5xx, at most one active assignment per complaint, every cold 303 stored; rising
tokens on the hot ones (``assign``), no token nor audit row (``baseline``).
"""

import itertools
import os
import random
import secrets
import shutil
import tempfile
import threading
import time
from collections import Counter
from operator import itemgetter
from pathlib import Path

import requests
from django.conf import settings
from django.db import connection

from bench import fixtures
from bench.environment import free_port, start_gunicorn, start_stand_in, stop
from bench.http_baseline import PREFIX
from bench.measure import check, median, percentile, result, since_us
from hoa.models import Complaint
from locking.models import FenceEvent
from vendors.models import VendorAssignment
from vendors.operations import assignment_resource

HOT_COMPLAINTS = 4
HOT_SHARE = 0.5
MESSAGES_COOKIE = "messages"  # django.contrib.messages' cookie storage
HOST = "127.0.0.1"


def _logged_in_session(user) -> requests.Session:
    """A ``requests`` session of ``user`` (as ``force_login`` logs in: no PBKDF2), CSRF set."""
    session = requests.Session()
    # Host-only cookies for 127.0.0.1, as the server sets them, so a cookie the server
    # sends later replaces ours instead of sitting beside it under the same name.
    key = fixtures.session_key(user)
    session.cookies.set(settings.SESSION_COOKIE_NAME, key, domain=HOST, path="/")
    # A CSRF secret of our own: the form field repeats it, as a page's form would.
    session.cookies.set(settings.CSRF_COOKIE_NAME, secrets.token_hex(16), domain=HOST, path="/")
    return session


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` and its children (gunicorn's workers)."""
    pids = [pid, *Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    stats = [Path(f"/proc/{each}/stat").read_text().rpartition(")")[2].split() for each in pids]
    # utime and stime, fields 14 and 15 of proc(5): the 12th and 13th after the name
    return sum(int(stat[11]) + int(stat[12]) for stat in stats) / os.sysconf("SC_CLK_TCK")


def run(*, variant: str, redis_url: str, seconds: float, clients: int) -> dict:
    """Drive the ``variant`` endpoint with ``clients`` threads for ``seconds``; report answers."""
    org = fixtures.organization("bench-http")
    users = [fixtures.staff_user(f"bench-http-{n}", org) for n in range(clients)]
    vendor_ids = [v.pk for v in fixtures.vendors_with_contracts(org, 3)]
    label = fixtures.unique_label("http")
    hot = [c.pk for c in fixtures.complaints(org, HOT_COMPLAINTS, title=f"{label} hot")]
    cold = fixtures.complaints(org, int(seconds * 250) + 100, title=f"{label} cold")
    cold_ids = iter(c.pk for c in cold)
    cold_lock = threading.Lock()
    answers: list[tuple[str, int, float, int]] = []  # (kind, status, µs, complaint)
    errors: list[str] = []

    def post(session: requests.Session, chooser: random.Random, record: bool = True) -> bool:
        """One POST, to a hot or a new cold complaint; False when the cold ones ran out."""
        if chooser.random() < HOT_SHARE:
            kind, complaint = "hot", chooser.choice(hot)
            data = {"vendor": chooser.choice(vendor_ids), "reassign": "on"}
        else:
            with cold_lock:
                complaint = next(cold_ids, None)
            if complaint is None:
                return False
            kind, data = "cold", {"vendor": vendor_ids[0]}
        cookies = session.cookies
        data["csrfmiddlewaretoken"] = cookies.get(settings.CSRF_COOKIE_NAME, "", domain=HOST)
        url = f"{base}/{prefix}orgs/{org.slug}/complaints/{complaint}/assign/"
        started = time.perf_counter_ns()
        try:
            response = session.post(url, data=data, allow_redirects=False, timeout=30)
        except requests.RequestException as exc:
            errors.append(str(exc))
            return True
        if record:
            answers.append((kind, response.status_code, since_us(started), complaint))
        # The 303 leaves a flash message for the next page; a browser shows it and it
        # is gone. Dropping it here keeps it from piling up in the cookie.
        cookies.set(MESSAGES_COOKIE, None, domain=HOST, path="/")
        return True

    def client(session: requests.Session, seed: int) -> None:
        chooser = random.Random(seed)
        try:
            # Untimed, before the clock starts: the workers import, connect, compile templates.
            post(session, chooser, record=False)
            barrier.wait(60)
            while time.monotonic() < clock["deadline"] and post(session, chooser):
                pass
        except BaseException:
            errors.append("a client thread crashed (see stderr)")
            raise

    def start_clock() -> None:  # the barrier's action: all warmed up, none released yet
        clock.update(started=time.monotonic(), cpu=time.process_time())
        clock.update(deadline=clock["started"] + seconds, server=_cpu_seconds(process.pid))

    dispatch, dispatch_url = start_stand_in("dispatch")
    port, run_dir = free_port(), tempfile.mkdtemp(prefix="hoa-bench-gunicorn-")
    base, prefix = f"http://{HOST}:{port}", PREFIX if variant == "baseline" else ""
    process = start_gunicorn(
        port, run_dir, secret_key=settings.SECRET_KEY, VENDOR_DISPATCH_URL=dispatch_url,
        EXTERNAL_CALL_TIMEOUT_SECONDS="5",
    )  # fmt: skip
    try:
        sessions = [_logged_in_session(user) for user in users]
        connection.close()
        clock: dict[str, float] = {}
        barrier = threading.Barrier(clients + 1, action=start_clock)
        threads = [threading.Thread(target=client, args=(s, n)) for n, s in enumerate(sessions)]
        for thread in threads:
            thread.start()
        barrier.wait(60)
        for thread in threads:
            thread.join(seconds + 60)
        wall, client_cpu = time.monotonic() - clock["started"], time.process_time() - clock["cpu"]
        server_cpu = _cpu_seconds(process.pid) - clock["server"]
    finally:
        stop(process, grace=40)
        dispatch.shutdown()
        shutil.rmtree(run_dir, ignore_errors=True)

    statuses = Counter(status for _, status, _, _ in answers)
    total, samples = len(answers), [us for _, _, us, _ in answers]
    server_errors = sum(count for status, count in statuses.items() if status >= 500)
    by_kind = {kind: [us for k, _, us, _ in answers if k == kind] for kind in ("hot", "cold")}
    cold_ok = {complaint for kind, code, _, complaint in answers if (kind, code) == ("cold", 303)}
    mine = Complaint.objects.filter(title__startswith=label)
    assigned = VendorAssignment.objects.filter(complaint__in=mine, active=True)
    active = Counter(assigned.values_list("complaint_id", flat=True))
    assignments = VendorAssignment.objects.filter(complaint_id__in=hot).order_by("complaint", "pk")
    tokens = itertools.groupby(assignments.values_list("complaint", "fence_token"), itemgetter(0))
    rising = all(a[1] < b[1] for _, each in tokens for a, b in itertools.pairwise(each))
    metrics = {
        "requests": total, "requests_per_s": round(total / wall, 1),
        "server_cpu_ms_per_request": round(1000 * server_cpu / total, 2) if total else None,
        "server_cpu_share": round(server_cpu / wall, 2),  # of one CPU: gunicorn's processes
        "status_counts": {str(status): count for status, count in sorted(statuses.items())},
        "share_409": round(statuses.get(409, 0) / total, 3) if total else 0,
        "http_5xx": server_errors, "transport_errors": len(errors),
        **{f"{kind}_p50_ms": round(median(us) / 1000, 2) for kind, us in by_kind.items() if us},
        "p99_ms": round(percentile(samples, 99) / 1000, 2),
        "load_generator_cpu_share": round(client_cpu / wall, 2),
    }  # fmt: skip
    answered = f"{total} requests: {dict(sorted(statuses.items()))}; {len(errors)} transport errors"
    one_active = all(count == 1 for count in active.values())
    active_detail = f"{len(active)} complaints with an active assignment"
    if variant == "assign":
        fenced = check("hot tokens increase", rising, f"{assignments.count()} hot assignments")
    else:  # the baseline: no token recorded on its complaints, no audit row for them
        stamped = mine.filter(last_fence_token__gt=0).count()
        resources = [assignment_resource(pk) for pk in mine.values_list("pk", flat=True)]
        audited = FenceEvent.objects.filter(resource__in=resources).count()
        detail = f"{stamped} complaints with a token, {audited} audit rows"
        fenced = check("no fence token and no audit row", not (stamped or audited), detail)
    return result(
        samples,
        check("no 5xx and no transport errors", not (server_errors or errors) and total, answered),
        check("at most one active assignment per complaint", one_active, active_detail),
        check("every cold 303 is stored", cold_ok <= set(active), f"{len(cold_ok)} cold 303s"),
        fenced,
        metrics=metrics,
    )
