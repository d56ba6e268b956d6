"""Section 5: the staff assign endpoint (or its unfenced twin) under gunicorn, many logged-in
clients at once, half on a few hot complaints (docs/benchmarks.md, "How it is measured")."""

import itertools
import random
import secrets
import shutil
import tempfile
import threading
import time
from collections import Counter
from operator import itemgetter

import requests
from django.conf import settings
from django.db import connection

from bench import fixtures
from bench.environment import cpu_seconds, free_port, start_gunicorn, start_stand_in, stop
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
    # Host-only cookies, as the server sets them: one it sends later replaces ours. A CSRF
    # secret of our own: the form field repeats it, as a page's form would.
    for name, value in ((settings.SESSION_COOKIE_NAME, fixtures.session_key(user)),
                        (settings.CSRF_COOKIE_NAME, secrets.token_hex(16))):  # fmt: skip
        session.cookies.set(name, value, domain=HOST, path="/")
    return session


class _Load:
    """``clients`` threads POSTing for ``seconds``: answers (kind, status, µs, complaint)."""

    def __init__(self, org, *, url: str, seconds: float, clients: int, label: str):
        self.org, self.url, self.seconds = org, url, seconds
        self.vendors = [v.pk for v in fixtures.vendors_with_contracts(org, 3)]
        self.hot = [c.pk for c in fixtures.complaints(org, HOT_COMPLAINTS, title=f"{label} hot")]
        cold = fixtures.complaints(org, int(seconds * 250) + 100, title=f"{label} cold")
        self.cold, self.cold_lock = iter(c.pk for c in cold), threading.Lock()
        users = [fixtures.staff_user(f"bench-http-{n}", org) for n in range(clients)]
        self.sessions = [_logged_in_session(user) for user in users]
        self.answers: list[tuple[str, int, float, int]] = []
        self.errors: list[str] = []
        self.clock: dict[str, float] = {}

    def post(self, session: requests.Session, chooser: random.Random, record=True) -> bool:
        """One POST, to a hot or a new cold complaint; False when the cold ones ran out."""
        if chooser.random() < HOT_SHARE:
            kind, complaint = "hot", chooser.choice(self.hot)
            data = {"vendor": chooser.choice(self.vendors), "reassign": "on"}
        else:
            with self.cold_lock:
                kind, complaint, data = "cold", next(self.cold, None), {"vendor": self.vendors[0]}
            if complaint is None:
                return False
        cookies = session.cookies
        data["csrfmiddlewaretoken"] = cookies.get(settings.CSRF_COOKIE_NAME, "", domain=HOST)
        started = time.perf_counter_ns()
        try:
            url = f"{self.url}orgs/{self.org.slug}/complaints/{complaint}/assign/"
            response = session.post(url, data=data, allow_redirects=False, timeout=30)
        except requests.RequestException as exc:
            self.errors.append(str(exc))
            return True
        if record:
            self.answers.append((kind, response.status_code, since_us(started), complaint))
        # The flash message the 303 leaves: a browser shows it and it is gone.
        cookies.set(MESSAGES_COOKIE, None, domain=HOST, path="/")
        return True

    def _client(self, session: requests.Session, seed: int, barrier) -> None:
        chooser = random.Random(seed)
        try:
            self.post(session, chooser, record=False)  # the workers warm up
            barrier.wait(60)
            while time.monotonic() < self.clock["deadline"] and self.post(session, chooser):
                pass
        except BaseException:
            self.errors.append("a client thread crashed (see stderr)")
            raise

    def drive(self, server_pid: int) -> dict:

        def start_clock() -> None:  # the barrier's action: all warmed up, none released yet
            now = time.monotonic()
            self.clock.update(started=now, deadline=now + self.seconds,
                              cpu=time.process_time(), server=cpu_seconds(server_pid))  # fmt: skip

        connection.close()
        barrier = threading.Barrier(len(self.sessions) + 1, action=start_clock)
        threads = [
            threading.Thread(target=self._client, args=(session, n, barrier))
            for n, session in enumerate(self.sessions)
        ]
        for thread in threads:
            thread.start()
        barrier.wait(60)
        for thread in threads:
            thread.join(self.seconds + 60)
        return {
            "wall": time.monotonic() - self.clock["started"],
            "client_cpu": time.process_time() - self.clock["cpu"],
            "server_cpu": cpu_seconds(server_pid) - self.clock["server"],
        }


def run(*, variant: str, redis_url: str, seconds: float, clients: int) -> dict:
    label = fixtures.unique_label("http")
    dispatch, dispatch_url = start_stand_in("/dispatch")
    port, run_dir = free_port(), tempfile.mkdtemp(prefix="hoa-bench-gunicorn-")
    url = f"http://{HOST}:{port}/{PREFIX if variant == 'baseline' else ''}"
    load = _Load(fixtures.organization("bench-http"), url=url, seconds=seconds,
                 clients=clients, label=label)  # fmt: skip
    process = start_gunicorn(
        port, run_dir, secret_key=settings.SECRET_KEY, VENDOR_DISPATCH_URL=dispatch_url,
        EXTERNAL_CALL_TIMEOUT_SECONDS="5",
    )  # fmt: skip
    try:
        spent = load.drive(process.pid)
    finally:
        stop(process, grace=40)
        dispatch.shutdown()
        shutil.rmtree(run_dir, ignore_errors=True)
    metrics = _metrics(load, **spent)
    samples = [us for _, _, us, _ in load.answers]
    return result(samples, *_checks(variant, load, label, metrics), metrics=metrics)


def _metrics(load: _Load, *, wall: float, client_cpu: float, server_cpu: float) -> dict:
    statuses = Counter(status for _, status, _, _ in load.answers)
    total, samples = len(load.answers), [us for _, _, us, _ in load.answers]
    by_kind = {kind: [us for k, _, us, _ in load.answers if k == kind] for kind in ("hot", "cold")}
    return {
        "requests": total, "requests_per_s": round(total / wall, 1),
        "server_cpu_ms_per_request": round(1000 * server_cpu / total, 2) if total else None,
        "server_cpu_share": round(server_cpu / wall, 2),  # of one CPU: gunicorn's processes
        "status_counts": {str(status): count for status, count in sorted(statuses.items())},
        "share_409": round(statuses.get(409, 0) / total, 3) if total else 0,
        "http_5xx": sum(count for status, count in statuses.items() if status >= 500),
        "transport_errors": len(load.errors),
        **{f"{kind}_p50_ms": round(median(us) / 1000, 2) for kind, us in by_kind.items() if us},
        "p99_ms": round(percentile(samples, 99) / 1000, 2),
        "load_generator_cpu_share": round(client_cpu / wall, 2),
    }  # fmt: skip


def _checks(variant: str, load: _Load, label: str, metrics: dict) -> list[dict]:
    """No 5xx; one active assignment each; rising hot tokens, or (baseline) no token or audit."""
    answered = f"{len(load.answers)} requests: {metrics['status_counts']}; "
    answered += f"{len(load.errors)} transport errors"
    cold_ok = {c for kind, code, _, c in load.answers if (kind, code) == ("cold", 303)}
    mine = Complaint.objects.filter(title__startswith=label)
    assigned = VendorAssignment.objects.filter(complaint__in=mine, active=True)
    active = Counter(assigned.values_list("complaint_id", flat=True))
    if variant == "assign":
        hot = VendorAssignment.objects.filter(complaint_id__in=load.hot).order_by("complaint", "pk")
        tokens = itertools.groupby(hot.values_list("complaint", "fence_token"), itemgetter(0))
        rising = all(a[1] < b[1] for _, each in tokens for a, b in itertools.pairwise(each))
        fenced = check("hot tokens increase", rising, f"{hot.count()} hot assignments")
    else:
        stamped = mine.filter(last_fence_token__gt=0).count()
        resources = [assignment_resource(pk) for pk in mine.values_list("pk", flat=True)]
        audited = FenceEvent.objects.filter(resource__in=resources).count()
        detail = f"{stamped} complaints with a token, {audited} audit rows"
        fenced = check("no fence token and no audit row", not (stamped or audited), detail)
    clean = not (metrics["http_5xx"] or load.errors) and load.answers
    return [
        check("no 5xx and no transport errors", clean, answered),
        check("at most one active assignment per complaint",
              all(count == 1 for count in active.values()),
              f"{len(active)} complaints with an active assignment"),
        check("every cold 303 is stored", cold_ok <= set(active), f"{len(cold_ok)} cold 303s"),
        fenced,
    ]  # fmt: skip
