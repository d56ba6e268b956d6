"""``python -m bench.cpu`` (``make bench-cpu``): the web process's CPU per request in the
busiest hour's mix: the locustfile's tasks and weights through Django's test client."""

import argparse
import cProfile
import itertools
import os
import random
import re
import time
from statistics import mean, median

from django.conf import settings
from django.db import close_old_connections
from django.test import Client

from bench import environment, load

PROFILE = {"associations": 5, "complaints": 100, "vendors": 4, "invoices": 80}
WEIGHTS = {"dashboard": 6, "list": 8, "complaint": 6, "status": 6, "assign": 5, "reassign": 3,
           "open": 2, "pay": 2, "generate": 2}  # fmt: skip
_FROM = re.compile(r'name="from_status"[^>]*value="([a-z_]+)"|value="([a-z_]+)"[^>]*name="from_')
_TO = re.compile(r'<select name="to_status"[^>]*>(.*?)</select>', re.S)
_OPTION, _SEEN = re.compile(r'<option value="([a-z_]+)"'), re.compile(r'name="seen" value="(\d+)"')
_REPLACING = re.compile(r'<input type="hidden" name="replacing"(?: value="(\d*)")?')
CPU: dict[str, list[float]] = {}
MONTHS: dict[str, itertools.count] = {}


def timed(user: dict, name: str, path: str, data: dict | None = None) -> str:
    started = time.thread_time()
    close_old_connections()  # gunicorn's request_started (and _finished)
    post = {"data": data, "HTTP_X_CSRFTOKEN": user["csrf"], "HTTP_REFERER": "http://127.0.0.1/"}
    send = user["client"].get if data is None else user["client"].post
    answer = send(f"/orgs/{user['org']['slug']}/{path}", **post)
    CPU.setdefault(name, []).append((time.thread_time() - started) * 1000)
    assert answer.status_code < 500, (name, answer.status_code)
    return answer.content.decode()


def task(user: dict, kind: str) -> None:  # one of the locustfile's Staff tasks
    org, one = user["org"], f"complaints/{random.choice(user['org']['complaints'])}/"
    if kind in ("dashboard", "list", "complaint"):
        path = {"dashboard": "", "list": "complaints/"}.get(kind, one)
        timed(user, f"page: {kind.replace('list', 'complaint list')}", path)
    elif kind == "status":
        page = timed(user, "page: complaint", one)
        shown, menu = _FROM.search(page), _TO.search(page)
        if shown and menu and (offered := _OPTION.findall(menu.group(1))):
            data = {"from_status": shown.group(1) or shown.group(2), "note": "bench: cpu",
                    "to_status": random.choice(offered)}  # fmt: skip
            timed(user, "action: change status", f"{one}status/", data)
    elif kind in ("assign", "reassign"):
        page = timed(user, "page: complaint", one)
        if '<select name="vendor"' in page:
            replacing = ((shown := _REPLACING.search(page)) and shown.group(1)) or ""
            data = {"vendor": str(random.choice(org["vendors"])), "replacing": replacing,
                    **({"reassign": "on"} if kind == "reassign" else {})}  # fmt: skip
            timed(user, f"action: {kind} a vendor", f"{one}assign/", data)
    elif kind == "open":
        timed(user, "page: new complaint form", "complaints/new/")
        data = {"unit": str(random.choice(org["units"])), "title": "Tap", "description": "cpu",
                "priority": "normal", "reporter_name": "R", "reporter_email": "r@x.io"}  # fmt: skip
        timed(user, "action: open a complaint", "complaints/new/", data)
    elif kind == "pay" and org["invoices"]:
        invoice = f"invoices/{org['invoices'].pop(random.randrange(len(org['invoices'])))}/"
        if shown := _SEEN.search(timed(user, "page: invoice", invoice)):
            timed(user, "action: pay an invoice", f"{invoice}pay/", {"seen": shown.group(1)})
    elif kind == "generate":
        timed(user, "page: charge runs", "charges/")
        month = next(MONTHS[org["slug"]])  # as bench.fixtures.month numbers them
        generate = f"charges/{2001 + month // 12}-{month % 12 + 1:02d}/generate/"
        timed(user, "action: generate a month", generate, {"confirm": "yes"})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1200, help="tasks after 100 warm-up ones")
    parser.add_argument("--only", default="", help=f"some of the tasks: {', '.join(WEIGHTS)}")
    parser.add_argument("--profile", default="", help="write cProfile's stats to this file")
    args = parser.parse_args(argv)
    stand_in, url = environment.start_stand_in("/")
    production = {"ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "0", "STATIC_MANIFEST": "0",
                  "BILLING_WEBHOOK_URL": f"{url}billing", "VENDOR_DISPATCH_URL": f"{url}dispatch",
                  "VENDOR_PAYMENT_URL": f"{url}payment", "WEBHOOK_SIGNING_SECRET": "x"}  # fmt: skip
    with environment.private_redis(database := environment.database_url()):
        os.environ.update(production)  # over child_env's: as bench.load's gunicorn
        environment.prepare_database(database)
        world = load.build_world(PROFILE, 10)
        MONTHS.update({a["slug"]: itertools.count(load.FIRST_MONTH) for a in world["associations"]})
        staff = []
        for login in world["users"]:  # bench.load's staff, logged in
            client = Client(enforce_csrf_checks=True, HTTP_HOST="127.0.0.1")
            client.cookies.load({settings.SESSION_COOKIE_NAME: login["session"],
                                 settings.CSRF_COOKIE_NAME: login["csrf"]})  # fmt: skip
            org = world["associations"][login["association"]]
            staff.append({"client": client, "csrf": login["csrf"], "org": org})
        random.seed(48)
        weights = {kind: WEIGHTS[kind] for kind in args.only.split(",")} if args.only else WEIGHTS
        kinds = random.choices(list(weights), weights=list(weights.values()), k=args.tasks + 100)
        profiler = cProfile.Profile(time.thread_time)
        for n, kind in enumerate(kinds, start=-100):  # 100 to warm up: imports, templates
            if n == 0:  # measured from here on
                CPU.clear()
                if args.profile:
                    profiler.enable()
            task(random.choice(staff), kind)
        if args.profile:  # dump_stats disables it first
            profiler.dump_stats(args.profile)  # python -m pstats FILE; sort tottime; stats 30
    stand_in.shutdown()
    every = ("all", [ms for values in CPU.values() for ms in values])
    print(f"{'CPU ms per request':32} {'n':>5} {'median':>7} {'mean':>7}")
    for name, values in [*sorted(CPU.items(), key=lambda item: -len(item[1])), every]:
        print(f"{name:32} {len(values):5} {median(values):7.2f} {mean(values):7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
