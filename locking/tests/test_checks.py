"""locking's system checks (locking/checks.py): each misconfiguration an adopter met at the
first grant or the first request (issue 36) is reported by ``manage.py check`` with its id,
and the settings locking's tests and the project run with report none."""

import inspect
import os
import re
import sys
from pathlib import Path

import pytest
from django.core import checks
from django.test import override_settings

from locking import checks as locking_checks
from locking import fenced_checks
from locking.tests.support import INSTALLED, SOURCE_ROOT, run_django

TESTS = __name__.rsplit(".", 1)[0]  # locking.tests, or locking_tests against the wheel
SQLITE = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}


def locking_messages(**overrides) -> list[tuple[str, str]]:
    """``(id, message)`` of every locking check that the settings with ``overrides`` fail."""
    with override_settings(**overrides):
        return [
            (message.id, message.msg)
            for message in checks.run_checks()
            if message.id and message.id.startswith("locking.")
        ]


def locking_ids(**overrides) -> list[str]:
    return [check_id for check_id, _ in locking_messages(**overrides)]


def hint_of(check_id: str, **overrides) -> str:
    with override_settings(**overrides):
        (message,) = [m for m in checks.run_checks() if m.id == check_id]
    return message.hint


# --- the settings locking's tests run with, and the project's (tests/ops/test_dist.py and
# tests/house/test_foundation.py run hoa.settings itself) -----------------------------------


def test_the_settings_these_tests_run_with_report_no_locking_check():
    assert locking_messages() == []


@pytest.mark.slow
def test_manage_py_check_with_locking_s_test_settings_reports_no_issue():
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE_ROOT), *sys.path]))
    result = run_django("check", f"--settings={TESTS}.settings", "--fail-level=WARNING", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "System check identified no issues (0 silenced).\n"


# --- LOCK_DATABASE: E004, E005 ---------------------------------------------------------


def test_a_lock_database_that_is_not_a_database_is_e004(settings):
    aliases = ", ".join(map(repr, settings.DATABASES))
    assert locking_messages(LOCK_DATABASE="nope") == [
        (
            "locking.E004",
            f"LOCK_DATABASE is 'nope', which is not a database of DATABASES ({aliases}).",
        )
    ]


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_a_lock_database_that_is_not_postgresql_is_e005(settings):
    databases = {**settings.DATABASES, "lite": SQLITE}
    messages = locking_messages(DATABASES=databases, LOCK_DATABASE="lite")
    assert ("locking.E005", "LOCK_DATABASE 'lite' is sqlite, not PostgreSQL.") in messages
    # (and every fenced model is E012: its writes go to 'default', not to 'lite')
    assert {check_id for check_id, _ in messages} == {"locking.E005", "locking.E012"}
    assert "locking.E005" not in locking_ids(LOCK_DATABASE="second")  # PostgreSQL too


# --- LOCK_REDIS_URL: E006, E007 --------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://:secret@cache.internal:6380/2?client_name=locks",
        "rediss://cache.internal:6380/0",
        "unix:///var/run/redis.sock?db=1",
        "redis+sentinel://s1:26379,s2:26379/mymaster/0",
        "redis+sentinel://:secret@s1:26379/mymaster",
        "redis+cluster://n1:7000,n2:7001",
    ],
)
def test_every_kind_of_redis_url_locking_supports_passes(url):
    assert locking_ids(LOCK_REDIS_URL=url) == []


def test_a_redis_url_with_a_scheme_redis_py_does_not_know_is_e006():
    assert locking_messages(LOCK_REDIS_URL="redsi://:s3cret@127.0.0.1:6379/0") == [
        (
            "locking.E006",
            "LOCK_REDIS_URL has the scheme redsi://, which locking cannot use. Did you mean "
            "redis://?",
        )
    ]
    assert locking_ids(LOCK_REDIS_URL="http://127.0.0.1:6379/0") == ["locking.E006"]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://127.0.0.1:abc/0", "Port could not be cast to integer value as 'abc'"),
        ("redis://127.0.0.1:6379/zero", "the database 'zero' is not a number"),
        ("redis://127.0.0.1/0?socket_timeout=soon", "Invalid value for 'socket_timeout' in "),
        ("unix://", "a unix:// URL needs the socket's path"),
        ("redis+sentinel://127.0.0.1:26379", "a Sentinel URL needs the service name"),
        ("redis+sentinel://s1:26379/master/one", "after the service name only a database"),
        ("redis+sentinel://s1:port/master", "a host's port is not a number"),
        ("redis+cluster://n1:7000/2", "Redis Cluster has no database number"),
        ("127.0.0.1:6379", "no scheme"),
    ],
)
def test_a_redis_url_that_does_not_parse_is_e007(url, problem):
    [(check_id, message)] = locking_messages(LOCK_REDIS_URL=url)
    assert check_id == "locking.E007"
    assert message.startswith("LOCK_REDIS_URL ")
    assert problem in message


def test_a_redis_url_check_never_shows_the_password():
    messages = locking_messages(LOCK_REDIS_URL="redsi://:s3cret@h:1/0")
    messages += locking_messages(LOCK_REDIS_URL="redis://:s3cret@h:port/0")
    assert [check_id for check_id, _ in messages] == ["locking.E006", "locking.E007"]
    assert not [message for _, message in messages if "s3cret" in message]


def test_the_redis_url_check_names_redis_url_when_the_lock_uses_it(settings):
    del settings.LOCK_REDIS_URL
    assert locking_messages(REDIS_URL="redis://127.0.0.1:6379/x") == [
        ("locking.E007", "REDIS_URL does not parse: the database 'x' is not a number.")
    ]


def test_a_redis_url_that_is_not_a_string_is_e007():
    assert locking_messages(LOCK_REDIS_URL=6379) == [
        ("locking.E007", "LOCK_REDIS_URL is not a string: 6379.")
    ]


# --- timeouts, retention, replicas: E008, E009 -----------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS", "abc"),
        ("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS", "2"),
        ("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS", 0),
        ("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS", float("nan")),
        ("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS", float("inf")),
        ("LOCK_REDIS_WAIT_TIMEOUT_MS", -5),
        ("LOCK_REDIS_WAIT_TIMEOUT_MS", 99.5),
        ("LOCK_REDIS_WAIT_TIMEOUT_MS", True),
        ("LOCK_FENCE_EVENT_RETENTION_DAYS", -30),
        ("LOCK_FENCE_EVENT_RETENTION_DAYS", 0),
        ("LOCK_FENCE_EVENT_RETENTION_DAYS", 7.5),
        ("LOCK_FENCE_EVENT_RETENTION_DAYS", None),
    ],
)
def test_a_timeout_or_retention_that_is_not_a_positive_number_is_e008(name, value):
    kind = "a number" if name == "LOCK_REDIS_SOCKET_TIMEOUT_SECONDS" else "a whole number"
    assert locking_messages(**{name: value}) == [
        ("locking.E008", f"{name} must be {kind} greater than 0, not {value!r}.")
    ]


def test_positive_timeouts_and_retention_pass():
    assert (
        locking_ids(
            LOCK_REDIS_SOCKET_TIMEOUT_SECONDS=0.25,
            LOCK_REDIS_WAIT_TIMEOUT_MS=50,
            LOCK_FENCE_EVENT_RETENTION_DAYS=365,
        )
        == []
    )


@pytest.mark.parametrize("value", ["1", -1, 1.5, None])
def test_min_replicas_that_is_not_a_whole_number_of_at_least_0_is_e009(value):
    assert locking_messages(LOCK_REDIS_MIN_REPLICAS=value) == [
        (
            "locking.E009",
            f"LOCK_REDIS_MIN_REPLICAS must be a whole number of at least 0, not {value!r}.",
        )
    ]
    assert locking_ids(LOCK_REDIS_MIN_REPLICAS=2) == []


def test_a_bad_number_is_reported_once_not_as_a_crash_of_e003():
    # E003 compares the replicas' wait with the socket timeout: with a value that is not a
    # number it stays silent (it used to raise ValueError out of the check framework).
    assert locking_ids(LOCK_REDIS_MIN_REPLICAS=1, LOCK_REDIS_WAIT_TIMEOUT_MS="abc") == [
        "locking.E008"
    ]


# --- LOCK_CLIENT_IP_CALLABLE: E010 -----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("no_such_module.client_ip", "does not import: No module named 'no_such_module'"),
        ("locking.operators.no_such_function", 'does not import: Module "locking.operators"'),
        ("locking.conf.DEFAULTS", "is not callable: 'locking.conf.DEFAULTS'"),
        (42, "is not a dotted path: 42"),
    ],
)
def test_a_client_ip_callable_that_does_not_import_is_e010(path, problem):
    [(check_id, message)] = locking_messages(LOCK_CLIENT_IP_CALLABLE=path)
    assert check_id == "locking.E010"
    assert message.startswith(f"LOCK_CLIENT_IP_CALLABLE {problem}")


def test_a_client_ip_callable_that_imports_passes():
    assert locking_ids(LOCK_CLIENT_IP_CALLABLE="locking.operators.client_ip") == []


# --- LOCK_SCOPES_CALLABLE: E015 --------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("no_such_module.lock_scopes", "does not import: No module named 'no_such_module'"),
        ("locking.operators.no_such_function", 'does not import: Module "locking.operators"'),
        ("locking.conf.DEFAULTS", "is not callable: 'locking.conf.DEFAULTS'"),
        (None, "is not a dotted path: None"),
        ("", "is not a dotted path: ''"),
    ],
)
def test_a_scopes_callable_that_does_not_import_is_e015(path, problem):
    """Else every page of locking's admin is a 500, and `locks break` a traceback."""
    [(check_id, message)] = locking_messages(LOCK_SCOPES_CALLABLE=path)
    assert check_id == "locking.E015"
    assert message.startswith(f"LOCK_SCOPES_CALLABLE {problem}")


def test_a_scopes_callable_that_imports_passes():
    assert locking_ids(LOCK_SCOPES_CALLABLE="locking.operators.recorded_scopes") == []


# --- receivers without a secret: E011 --------------------------------------------------


def test_a_receiver_view_without_a_secret_is_e011_wherever_the_urlconf_puts_it():
    urls = f"{TESTS}.urls_receiver_without_secret"
    assert locking_messages(ROOT_URLCONF=urls, LOCK_RECEIVER_SECRET="") == [
        (
            "locking.E011",
            f"The fenced receiver 'billing' at 'billing/' ({urls}.billing) has no secret to "
            "verify signatures with.",
        ),
        (
            "locking.E011",
            f"The fenced receiver 'dispatch' at 'hooks/dispatch/' ({urls}.dispatch) has no "
            "secret to verify signatures with.",
        ),
    ]
    # LOCK_RECEIVER_SECRET is the secret of every receiver not given its own.
    assert locking_ids(ROOT_URLCONF=urls, LOCK_RECEIVER_SECRET="shared-secret") == []
    # locking's test URLconf has a receiver with its own secret.
    assert locking_ids(ROOT_URLCONF=f"{TESTS}.urls", LOCK_RECEIVER_SECRET="") == []


# --- fenced models routed elsewhere: E012 ----------------------------------------------


class FencedThingElsewhere:
    """A database router that sends the test app's fenced model to the second database."""

    def db_for_write(self, model, **hints):
        return "second" if model._meta.label == "locking_testapp.FencedThing" else None

    db_for_read = db_for_write


def test_a_fenced_model_routed_away_from_the_lock_database_is_e012():
    router = f"{__name__}.FencedThingElsewhere"
    assert locking_messages(DATABASE_ROUTERS=[router]) == [
        (
            "locking.E012",
            "locking_testapp.FencedThing carries a fence (last_fence_token), but the database "
            "routers send its writes to 'second', not LOCK_DATABASE 'default'.",
        )
    ]
    # The same router is right when the fence lives in the second database with the rows.
    messages = locking_messages(DATABASE_ROUTERS=[router], LOCK_DATABASE="second")
    assert not [message for _, message in messages if "locking_testapp.FencedThing" in message]


# --- LOCK_ names locking does not know: W002 -------------------------------------------


def test_a_misspelt_lock_setting_is_w002_naming_the_closest_known_name():
    assert locking_messages(LOCK_REDIS_ULR="redis://elsewhere:6379/0") == [
        ("locking.W002", "LOCK_REDIS_ULR is not a setting of locking: it has no effect.")
    ]
    assert hint_of("locking.W002", LOCK_REDIS_ULR="x") == "Did you mean LOCK_REDIS_URL?"
    assert hint_of("locking.W002", LOCK_RETENTION_DAYZ=9) == (
        "Did you mean LOCK_FENCE_EVENT_RETENTION_DAYS?"
    )


def test_a_lock_setting_like_no_known_one_is_w002_listing_the_known_names():
    hint = hint_of("locking.W002", LOCK_QUEUE="jobs")
    assert hint.startswith("locking reads LOCK_REDIS_URL, LOCK_REDIS_SOCKET_TIMEOUT_SECONDS, ")


# --- every id, documented -------------------------------------------------------------------


def test_every_check_id_is_listed_in_the_modules_table_and_in_docs_locking_checks_md():
    """An id an operator reads in ``manage.py check`` is explained where they look."""
    source = inspect.getsource(locking_checks) + inspect.getsource(fenced_checks)
    raised = set(re.findall(r'id="(locking\.[EW]\d{3})"', source))
    assert {"locking.E014", "locking.E016"} <= raised and len(raised) >= 15
    table = locking_checks.__doc__ or ""
    assert sorted(i for i in raised if f"``{i}``" not in table) == []
    if INSTALLED:
        pytest.skip("the wheel carries no docs/")
    page = (SOURCE_ROOT / "docs" / "locking" / "checks.md").read_text()
    assert sorted(i for i in raised if f"`{i}`" not in page) == []
    # Issue 45, item 1: each id with the test that shows it, and that test exists.
    shown_by = dict(re.findall(r"^\| `(locking\.[EW]\d{3})` \| `(test_\w+)`", page, re.M))
    assert sorted(raised - set(shown_by)) == []
    suite = "".join(path.read_text() for path in Path(__file__).parent.glob("*.py"))
    assert sorted(test for test in shown_by.values() if f"def {test}(" not in suite) == []
