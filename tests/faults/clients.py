"""The suite's clients: staff over HTTP and cron over ``manage.py``, each answer recorded.

Every call returns an ``Op``: what was asked, when (wall clock, to compare with the
timestamps the app writes), and what the client was told, reduced to one verdict:

=============  =========================================================================
verdict        meaning (HTTP / command)
=============  =========================================================================
done           303 with a success message / exit 0 "Generated…", "…is assigned…", "…is closed
               now", "Paid…"
already_done   303 with an info message / exit 0 "already generated", "already the vendor",
               "already paid"
succeeded      303 whose message could not be read (its page stayed unavailable): done or
               already done, the checker accepts either
refused        409 / exit 75: busy, superseded by a newer holder, the status changed;
               409 / exit 1 overtaken: assigned to another, closed, changed since looked
               (an invoice voided, or sent for payment); 400 / exit 1 "This complaint is
               closed" (a vendor for a closed complaint: the rule table's answer, nothing
               written)
unavailable    503 / exit 1 naming Redis or PostgreSQL: nothing was written
indeterminate  503 naming the database ("Temporarily unavailable"): PostgreSQL went away
               or did not answer, perhaps during the COMMIT; the write may be there or not
               (Jepsen's ``info``)
failed         502 / exit 1 naming the billing, dispatch or payment service: it refused
not_known      202 / exit 75 "did not say whether it acted": the outside may have acted (a
               timeout, a lost connection); nothing of the operation was written, the
               attempt is recorded to be settled by the same key
invalid        400, 403, 404, 429 / any other exit 1
error          500 or a traceback: a clear answer was owed and not given
no_answer      the connection broke or the client gave up: the outcome is unknown
unread         a status change whose complaint page could not be read: nothing was posted
=============  =========================================================================
"""

import re
import secrets
import string
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field

import requests

from tests.harness.processes import run_manage

_MESSAGE = re.compile(r'<li class="msg ([a-z ]+)"[^>]*>(.*?)</li>', re.S)
_TITLE = re.compile(r"<h1[^>]*>(.*?)</h1>", re.S)
# The complaint page's status form: the status it shows, and the changes it offers.
_SHOWN_STATUS = re.compile(r'<input type="hidden" name="from_status" value="([a-z_]+)"')
_OFFERED = re.compile(r'<option value="([a-z_]+)"')
_STATUS_FORM = re.compile(r'data-testid="status-form">(.*?)</form>', re.S)
# The refusals that are a rule's answer, nothing written (the title of their page).
RULE_REFUSALS = ("This complaint is closed",)
_TAGS = re.compile(r"<[^>]+>")
# The title of hoa.ops.middleware's 503 page (the database, not the lock service).
DATABASE_UNAVAILABLE = "Temporarily unavailable"
NEVER_SEEN = {"seen": str(2**31 - 1)}
MESSAGE_READS = 8
MESSAGE_RETRY_SECONDS = 0.5


@dataclass
class Op:
    """One request and what its client was told."""

    kind: str  # "charges", "assign", "status", "pay", "void", or "nemesis" (scenario 9's)
    org: str
    org_id: int
    client: str = ""
    user: str = ""
    via: str = ""  # "http:a", "http:b", "command"
    month: str | None = None
    complaint: int | None = None
    vendor: int | None = None
    reassign: bool = False
    # A status change: the one wished for (the page may not offer it: then another it
    # offers), and what was posted: the status the page showed and the one asked for.
    wish: str = ""
    status_from: str = ""
    status_to: str = ""
    invoice: int | None = None
    seen: int | None = None  # a void's or a payment's version of the invoice, read just before
    started: float = field(default_factory=time.time)
    ended: float = 0.0
    verdict: str = ""
    status: int | None = None
    detail: str = ""

    @property
    def resource(self) -> str:
        if self.kind == "charges":
            return f"monthly-charges:org:{self.org_id}:{self.month}"
        if self.kind == "nemesis":
            return f"nemesis:complaint:{self.complaint}"
        if self.kind == "status":
            return f"complaint:{self.complaint}"
        if self.kind in ("pay", "void"):
            return f"vendor-payment:invoice:{self.invoice}"
        return f"vendor-assignment:complaint:{self.complaint}"

    def as_dict(self) -> dict:
        return {**asdict(self), "resource": self.resource}


class History:
    """Every operation of a scenario, appended from any thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self.ops: list[Op] = []

    def add(self, op: Op) -> Op:
        with self._lock:
            self.ops.append(op)
        return op

    def snapshot(self) -> list[Op]:
        with self._lock:
            return list(self.ops)


def _title(html: str) -> str:
    title = _TITLE.search(html)
    return _text(title.group(1))[:200] if title else ""


def _text(html: str) -> str:
    return " ".join(_TAGS.sub(" ", html).split())


def _csrf_secret() -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(32))


class StaffClient:
    """A logged-in staff member's browser, reduced to the two POSTs under test."""

    def __init__(self, *, name: str, base_url: str, instance: str, username: str, session: str):
        self.name = name
        self.base_url = base_url
        self.instance = instance
        self.username = username
        self.http = requests.Session()
        self.http.cookies.set("sessionid", session, domain="127.0.0.1", path="/")
        # Django accepts its CSRF secret itself (unmasked) in the header.
        self.csrf = _csrf_secret()
        self.http.cookies.set("csrftoken", self.csrf, domain="127.0.0.1", path="/")

    def send(self, op: Op, *, timeout: float = 30) -> Op:
        """POST ``op`` (generate, assign or a status change) as this user and record the
        answer on it."""
        op.client = op.client or self.name
        op.user, op.via = self.username, f"http:{self.instance}"
        if op.kind == "status":
            return self._change_status(op, timeout)
        if op.kind == "charges":
            # The month is chosen by the scenario: confirmed, as the page's button does.
            url = f"/orgs/{op.org}/charges/{op.month}/generate/"
            return self._post(op, url, {"confirm": "yes"}, timeout)
        if op.kind == "pay":
            # The version the page showed (a version it never showed when the page could
            # not be read): an invoice changed since is "changed since you looked" (409).
            seen = {"seen": str(op.seen)} if op.seen is not None else NEVER_SEEN
            return self._post(op, f"/orgs/{op.org}/invoices/{op.invoice}/pay/", seen, timeout)
        if op.kind == "void":
            data = {"void-seen": str(op.seen), "void-reason": "nemesis: sent twice"}
            return self._post(op, f"/orgs/{op.org}/invoices/{op.invoice}/void/", data, timeout)
        data = {"vendor": str(op.vendor)}
        if op.reassign:
            data["reassign"] = "on"
        return self._post(op, f"/orgs/{op.org}/complaints/{op.complaint}/assign/", data, timeout)

    def _change_status(self, op: Op, timeout: float) -> Op:
        """Read the complaint page as a person does, then post the change it offers that
        ``op.wish``es (or the first it offers), from the status it shows."""
        path = f"/orgs/{op.org}/complaints/{op.complaint}/"
        op.started = time.time()
        try:
            page = self.http.get(self.base_url + path, timeout=timeout)
        except requests.RequestException as exc:
            op.ended = time.time()
            op.verdict, op.detail = "unread", f"page: {exc.__class__.__name__}"
            return op
        form = _STATUS_FORM.search(page.text) if page.status_code == 200 else None
        shown = _SHOWN_STATUS.search(form.group(1)) if form else None
        offered = _OFFERED.findall(form.group(1)) if form else []
        if shown is None or not offered:
            op.ended = time.time()
            op.verdict, op.detail = "unread", f"page: {page.status_code} {_title(page.text)}"
            return op
        op.status_from = shown.group(1)
        op.status_to = op.wish if op.wish in offered else offered[0]
        data = {
            "from_status": op.status_from,
            "to_status": op.status_to,
            "note": f"{self.name}: {op.status_from} to {op.status_to}",
        }
        started = op.started
        self._post(op, f"{path}status/", data, timeout)
        op.started = started  # the request began with the page it decided on
        return op

    def _post(self, op: Op, path: str, data: dict, timeout: float) -> Op:
        op.started = time.time()
        try:
            response = self.http.post(
                self.base_url + path,
                data=data,
                headers={"X-CSRFToken": self.csrf, "Referer": self.base_url + path},
                allow_redirects=False,
                timeout=timeout,
            )
        except requests.RequestException as exc:
            op.ended = time.time()
            op.verdict, op.detail = "no_answer", exc.__class__.__name__
            return op
        op.ended = time.time()
        op.status = response.status_code
        op.verdict, op.detail = self._classify(response, timeout)
        return op

    def _read_message(self, location: str, timeout: float) -> tuple[str, str]:
        """The message says whether this request did the work or found it done.

        The page it is on may itself be unavailable for a moment (the nemesis partitions
        Redis and PostgreSQL): the message waits in its cookie, so try again a few times.
        A success whose message never could be read is ``succeeded``: done or already done.
        """
        why = ""
        for attempt in range(MESSAGE_READS):
            if attempt:
                time.sleep(MESSAGE_RETRY_SECONDS)
            try:
                page = self.http.get(self.base_url + location, timeout=timeout)
            except requests.RequestException as exc:
                why = exc.__class__.__name__
                continue
            for tags, message in _MESSAGE.findall(page.text):
                return verdict_of_message(tags), _text(message)[:300]
            why = f"{page.status_code} {_title(page.text)}"
            if page.status_code == 200:
                break  # the page was shown without a message: no retry brings it back
        return "succeeded", f"303; message not read ({why})"

    def _classify(self, response: requests.Response, timeout: float) -> tuple[str, str]:
        status = response.status_code
        if status == 303:
            return self._read_message(response.headers["Location"], timeout)
        detail = _title(response.text)
        return verdict_of_answer(status, detail), detail


def verdict_of_message(tags: str | None) -> str:
    """The verdict of a 303 by the tags of the message the next page showed (``None``: the
    message was not read: done or already done)."""
    if tags is None:
        return "succeeded"
    return "already_done" if "info" in tags.split() else "done"


def verdict_of_answer(status: int, title: str) -> str:
    """The verdict of an answer other than a 303 (``status`` 0: none came), by its status
    and its page's title."""
    if not status:
        return "no_answer"
    verdict = {409: "refused", 503: "unavailable", 502: "failed", 202: "not_known"}.get(status)
    if status == 400 and title in RULE_REFUSALS:
        verdict = "refused"  # the rule table's answer (a vendor for a closed complaint)
    if status == 503 and title == DATABASE_UNAVAILABLE:
        # The request lost PostgreSQL; if that happened during its COMMIT, the write
        # may have landed. Only the database can say: the checker accepts either.
        verdict = "indeterminate"
    if verdict is None:
        verdict = "invalid" if status in (400, 403, 404, 429) else "error"
    return verdict


# -- commands --------------------------------------------------------------------------------


def command_args(op: Op) -> list[str]:
    if op.kind == "charges":
        return [
            "generate_monthly_charges",
            "--org",
            op.org,
            "--month",
            op.month,
            "--actor",
            op.user,
        ]
    args = ["assign_vendor", "--complaint", str(op.complaint), "--vendor", str(op.vendor)]
    if op.reassign:
        args.append("--reassign")
    return [*args, "--actor", op.user]


# The sentences of an overtaken request (the answer table's 409 / exit 1): refused, as a 409.
OVERTAKEN_SAID = (
    "already has a vendor",
    "was closed since you looked",
    "changed before it was paid",
    "changed since you looked",
    "was sent to the payment service",
)


def classify_command(op: Op, returncode: int | None, stdout: str, stderr: str) -> Op:
    """Record a command's answer: its exit status and its last line (the one cron mails)."""
    op.ended = time.time()
    op.status = returncode
    out, err = stdout.strip(), stderr.strip()
    last_error = err.splitlines()[-1] if err else ""
    op.detail = (out.splitlines()[-1] if out and returncode == 0 else last_error)[:300]
    if returncode is None:
        op.verdict = "no_answer"  # killed, or it never finished: the outcome is unknown
    elif returncode == 0:
        already = "already generated" in out or "is already the vendor" in out
        op.verdict = "already_done" if already else "done"
    elif returncode == 75:
        unknown = "did not say whether it acted" in err
        op.verdict = "not_known" if unknown else "refused"
    elif "Traceback" in err or returncode != 1:
        op.verdict = "error"
    else:
        said = last_error.lower()
        if any(words in said for words in OVERTAKEN_SAID):
            op.verdict = "refused"  # another's change decided it: exit 1, not "try again"
        elif any(word in said for word in ("redis", "lock service", "postgresql")):
            op.verdict = "unavailable"
        elif any(word in said for word in ("billing", "dispatch")):
            op.verdict = "failed"
        else:
            op.verdict = "invalid"
    return op


def run_command(op: Op, *, env: dict, timeout: float = 60) -> Op:
    """Run the operation as its management command in a child process and classify it."""
    op.via = "command"
    op.started = time.time()
    try:
        result = run_manage(*command_args(op), env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return classify_command(op, None, str(exc.stdout or ""), str(exc.stderr or ""))
    return classify_command(op, result.returncode, result.stdout, result.stderr)
