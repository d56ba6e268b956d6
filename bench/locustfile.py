"""Locust's office staff for the busiest hour (``make bench-load``): each user one staff member
of one association, half its tasks a page, half a change on that page; every request and fenced
change recorded. Imports nothing of Django or of the project: Locust's own process."""

import itertools
import json
import os
import random
import re
import time
from pathlib import Path

from locust import HttpUser, LoadTestShape, constant_pacing, events, task

WORLD = json.loads(Path(os.environ["BENCH_LOAD_WORLD"]).read_text())
PLAN = WORLD["plan"]
PREFIX = WORLD["prefix"]  # "": the real POSTs; the baseline's twins: "bench/unfenced/"
HOST = "127.0.0.1"
# Each request names itself to the server too: gunicorn's access log then gives the
# server's own time per page and action (bench.load), beside the time Locust measured.
NAME_HEADER = "X-Bench-Name"

_MESSAGE = re.compile(r'<li class="msg ([a-z ]+)"[^>]*>(.*?)</li>', re.S)
_TITLE = re.compile(r"<h1[^>]*>(.*?)</h1>", re.S)
_TAGS = re.compile(r"<[^>]+>")
_FROM_STATUS = re.compile(
    r'name="from_status"[^>]*value="([a-z_]+)"|value="([a-z_]+)"[^>]*name="from_status"'
)
_TO_STATUS = re.compile(r'<select name="to_status"[^>]*>(.*?)</select>', re.S)
_OPTION = re.compile(r'<option value="([a-z_]+)"')
_REPLACING = re.compile(r'<input type="hidden" name="replacing"(?: value="(\d*)")?')
_VENDOR_SELECT = re.compile(r'<select name="vendor"')
_CREATED = re.compile(r"/complaints/(\d+)/$")
_SEEN = re.compile(r'name="seen" value="(\d+)"')


def _text(html: str) -> str:
    return " ".join(_TAGS.sub(" ", html).split())


# -- what the office knows, shared by the users of this process ---------------------------------
ASSOCIATIONS = WORLD["associations"]
_unassigned = {n: list(a["complaints"]) for n, a in enumerate(ASSOCIATIONS)}
_assigned: dict[int, list[int]] = {n: [] for n in range(len(ASSOCIATIONS))}
_approved = {n: list(a["invoices"]) for n, a in enumerate(ASSOCIATIONS)}
_months = {n: itertools.count(WORLD["first_month"]) for n in range(len(ASSOCIATIONS))}
_logins = iter(WORLD["users"])
HISTORY: list[dict] = []  # fenced changes, with what their users were told

STEPS = [(int(users), float(seconds)) for users, seconds in PLAN["steps"]]
STEP = {"index": 0, "measure_from": float("inf")}
SAMPLES: list[dict[str, list]] = [{} for _ in STEPS]  # per step: name -> [[ms, status], …]
STEP_TIMES: list[dict] = [{} for _ in STEPS]
COUNTED = {"requests": 0}


@events.request.add_listener
def _record(name, response_time, response, exception, **_kwargs):
    COUNTED["requests"] += 1  # warm-ups too: what the server's CPU was spent on
    if time.monotonic() < STEP["measure_from"]:
        return
    status = response.status_code if response is not None and exception is None else 0
    SAMPLES[STEP["index"]].setdefault(name, []).append([round(response_time, 2), status])


@events.test_stop.add_listener
def _write(**_kwargs):
    for user in _ALL_USERS:
        user.settle(None)  # a message never read: done or already done, the checker takes either
    if STEP_TIMES[STEP["index"]]:
        STEP_TIMES[STEP["index"]].setdefault("ended", time.monotonic())
    # The steps' times are monotonic; bench.load places the server's log lines by the wall.
    offset = time.time() - time.monotonic()
    out = {"steps": STEP_TIMES, "samples": SAMPLES, "history": HISTORY, "clock_offset": offset,
           **COUNTED}  # fmt: skip
    Path(WORLD["output"]).write_text(json.dumps(out))


class Steps(LoadTestShape):
    """The steps of ``PLAN``, one after the other; stops after the one whose p99 bent."""

    def tick(self):
        run_time, now = self.get_run_time(), time.monotonic()
        ends = itertools.accumulate(seconds for _, seconds in STEPS)
        index = next((n for n, end in enumerate(ends) if run_time < end), None)
        if index is None:
            STEP_TIMES[STEP["index"]].setdefault("ended", now)
            return None
        if not STEP_TIMES[index]:  # a step begins
            if index > 0:
                STEP_TIMES[index - 1].setdefault("ended", now)
                if _bent(index - 1):
                    return None
            # Not counted: while its new users start, and their first tasks spread out.
            added = STEPS[index][0] - (STEPS[index - 1][0] if index else 0)
            measure_from = now + added / PLAN["spawn_rate"] + PLAN["pacing"]
            STEP.update(index=index, measure_from=measure_from)
            STEP_TIMES[index].update(users=STEPS[index][0], started=now, measure_from=measure_from)
        return STEPS[index][0], PLAN["spawn_rate"]


def _p99(samples: dict[str, list]) -> float | None:
    times = sorted(ms for entries in samples.values() for ms, _ in entries)
    return times[max(1, -(-99 * len(times) // 100)) - 1] if times else None


def _bent(index: int) -> bool:
    """Whether step ``index``'s p99 bent: over ``bend`` x the first step's, and over the line."""
    first, now = _p99(SAMPLES[0]), _p99(SAMPLES[index])
    if index == 0 or first is None or now is None:
        return False
    return now > PLAN["bend"] * first and now > PLAN["p99_line_ms"]


_ALL_USERS: list["Staff"] = []


class Staff(HttpUser):
    """One staff member of one association: four pages and two changes a minute."""

    wait_time = constant_pacing(PLAN["pacing"])
    host = WORLD["base_url"]

    def on_start(self) -> None:
        login = next(_logins)
        self.username, self.association = login["username"], login["association"]
        self.org = ASSOCIATIONS[self.association]
        self.csrf = login["csrf"]
        cookies = {WORLD["session_cookie"]: login["session"], WORLD["csrf_cookie"]: self.csrf}
        for cookie, value in cookies.items():
            self.client.cookies.set(cookie, value, domain=HOST, path="/")
        self.pending: dict | None = None  # a 303 whose message the next page shows
        _ALL_USERS.append(self)
        # Spread the users' first tasks over the pacing, as people arrive, not in step.
        time.sleep(random.uniform(0, PLAN["pacing"]))

    # -- requests -------------------------------------------------------------------------------
    def page(self, path: str, name: str) -> str:
        with self.client.get(path, name=name, headers={NAME_HEADER: name}, catch_response=True,
                             allow_redirects=False) as answer:  # fmt: skip
            if answer.status_code != 200:
                answer.failure(f"{answer.status_code}")
                return ""
            answer.success()
            text = answer.text
        self.settle(text)
        return text

    def post(self, path: str, name: str, data: dict, op: dict | None = None):
        url = f"/{PREFIX}{path.lstrip('/')}"
        started = time.time()
        if op is not None:
            # Recorded before it is sent, as "no answer" until one comes: cut off, it may commit.
            op.update(started=started, ended=started, status=0)
            HISTORY.append(op)
        headers = {"X-CSRFToken": self.csrf, "Referer": f"{WORLD['base_url']}{path}",
                   NAME_HEADER: name}  # fmt: skip
        with self.client.post(url, data=data, name=name, headers=headers, allow_redirects=False,
                              catch_response=True) as answer:  # fmt: skip
            status = answer.status_code
            if status >= 500 or status == 0:
                answer.failure(f"{status}")
            else:
                answer.success()  # 303, and 4xx answers: what staff are told
            text = answer.text or ""
        if op is not None:
            op.update(ended=time.time(), status=status)
            if status == 303:
                self.pending = op  # its message is on the next page
            else:
                title = _TITLE.search(text)
                op["title"] = _text(title.group(1))[:200] if title else ""
        return status, answer

    def settle(self, page: str | None) -> None:
        """The message of the last 303, from the page shown after it (``None``: never read)."""
        if self.pending is None:
            return
        op, self.pending = self.pending, None
        found = _MESSAGE.findall(page or "")
        if found:
            op["message_tags"], op["message"] = found[0][0], _text(found[0][1])[:300]

    def _op(self, kind: str, **facts) -> dict:
        user = self.username
        return {"kind": kind, "org": self.org["slug"], "org_id": self.org["id"], "client": user,
                "user": user, "via": "http:a", **facts}  # fmt: skip

    # -- pages (half the tasks) ----------------------------------------------------------------
    @task(6)
    def dashboard(self) -> None:
        self.page(f"/orgs/{self.org['slug']}/", "page: dashboard")

    @task(8)
    def complaint_list(self) -> None:
        self.page(f"/orgs/{self.org['slug']}/complaints/", "page: complaint list")

    @task(6)
    def complaint(self) -> None:
        complaint = random.choice(self.org["complaints"])
        self.page(f"/orgs/{self.org['slug']}/complaints/{complaint}/", "page: complaint")

    # -- changes (the other half), each on the page its form is on --------------------------------
    @task(6)
    def change_status(self) -> None:
        complaint = random.choice(self.org["complaints"])
        path = f"/orgs/{self.org['slug']}/complaints/{complaint}/"
        page = self.page(path, "page: complaint")
        shown, menu = _FROM_STATUS.search(page), _TO_STATUS.search(page)
        offered = _OPTION.findall(menu.group(1)) if menu else []
        if not shown or not offered:
            return
        seen, to = shown.group(1) or shown.group(2), random.choice(offered)
        data = {"from_status": seen, "to_status": to, "note": "bench: the busiest hour"}
        # As the fault suite records one: its checker matches each status event to its request.
        op = self._op("status", complaint=complaint, wish=to, status_from=seen, status_to=to)
        self.post(f"{path}status/", "action: change status", data, op)

    @task(5)
    def assign(self) -> None:
        pool = _unassigned[self.association]
        if not pool:
            return self.reassign()
        self._assign(random.choice(pool), reassign=False)

    @task(3)
    def reassign(self) -> None:
        pool = _assigned[self.association]
        if not pool:
            return self.assign() if _unassigned[self.association] else None
        self._assign(random.choice(pool), reassign=True)

    def _assign(self, complaint: int, *, reassign: bool) -> None:
        path = f"/orgs/{self.org['slug']}/complaints/{complaint}/"
        page = self.page(path, "page: complaint")
        if not _VENDOR_SELECT.search(page):
            return  # no assign form on this complaint (a closed one)
        shown = _REPLACING.search(page)
        replacing = (shown.group(1) or "") if shown else ""
        vendor = random.choice(self.org["vendors"])
        data = {"vendor": str(vendor), "replacing": replacing}
        if reassign:
            data["reassign"] = "on"
        # The form replaces the assignment it showed, box or not: carrying one is a reassignment.
        op = self._op("assign", complaint=complaint, vendor=vendor,
                      reassign=reassign or bool(replacing))  # fmt: skip
        name = "action: reassign a vendor" if reassign else "action: assign a vendor"
        status, _ = self.post(f"{path}assign/", name, data, op)
        if status == 303 and complaint in _unassigned[self.association]:
            _unassigned[self.association].remove(complaint)
            _assigned[self.association].append(complaint)

    @task(2)
    def open_complaint(self) -> None:
        path = f"/orgs/{self.org['slug']}/complaints/new/"
        self.page(path, "page: new complaint form")
        data = {"unit": str(random.choice(self.org["units"])), "title": "Dripping tap",
                "description": "Opened by the busiest-hour benchmark.", "priority": "normal",
                "reporter_name": "Bench Resident", "reporter_email": "resident@example.com",
                "reporter_phone": ""}  # fmt: skip
        status, answer = self.post(path, "action: open a complaint", data)
        created = _CREATED.search(answer.headers.get("Location", "")) if status == 303 else None
        if created:
            _unassigned[self.association].append(int(created.group(1)))
            self.org["complaints"].append(int(created.group(1)))

    @task(2)
    def pay_invoice(self) -> None:
        pool = _approved[self.association]
        if not pool:
            return self.complaint()
        invoice = pool.pop(random.randrange(len(pool)))  # paid once: out of every user's pool
        path = f"/orgs/{self.org['slug']}/invoices/{invoice}/"
        shown = _SEEN.search(self.page(path, "page: invoice"))  # the Pay form's version
        if shown:
            op = self._op("pay", invoice=invoice, seen=int(shown.group(1)))
            self.post(f"{path}pay/", "action: pay an invoice", {"seen": shown.group(1)}, op)

    @task(2)
    def generate_month(self) -> None:
        slug = self.org["slug"]
        self.page(f"/orgs/{slug}/charges/", "page: charge runs")
        number = next(_months[self.association])
        month = f"{2001 + number // 12}-{number % 12 + 1:02d}"
        op = self._op("charges", month=month)
        self.post(f"/orgs/{slug}/charges/{month}/generate/", "action: generate a month",
                  {"confirm": "yes"}, op)  # fmt: skip
