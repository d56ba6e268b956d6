"""What operators copy, under deploy/ (issue 28): the alert rules and the dashboard query
only metrics that /metrics exports, every alert is unit-tested by promtool, and the systemd
units run commands that exist with arguments they accept, one timer per scheduled job.

`make check-deploy` runs this file after `promtool check rules`, `promtool test rules` and
`systemd-analyze verify`; these checks need neither tool.
"""

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ALERTS = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
ALERT_TESTS = yaml.safe_load((DEPLOY / "prometheus" / "alerts_test.yml").read_text())
DASHBOARD = json.loads((DEPLOY / "grafana" / "hoa-fenced-writes.json").read_text())
UNITS = DEPLOY / "systemd"
# The README's scheduled commands (its cron lines): each has a service and a timer.
SCHEDULED = {
    "hoa-sla-sweep": "sla_sweep",
    "hoa-publish-notices": "publish_notices",
    "hoa-month-start": "generate_monthly_charges",
    "hoa-prune-fence-events": "prune_fence_events",
    "hoa-prune-access-denials": "prune_access_denials",
    "hoa-forget-reporters": "forget_reporters",
    "hoa-send-reporter-emails": "send_reporter_emails",
    "hoa-insurance-lapses": "record_insurance_lapses",
    "hoa-pay-approved-invoices": "pay_approved_invoices",
    "hoa-settle-outside-calls": "settle_outside_calls",
}

# -- metric names in PromQL -------------------------------------------------------------

PROMQL_KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right",
}  # fmt: skip
# The text format's TYPE line names a counter with its _total, a histogram without suffix.
SAMPLE_SUFFIXES = {"histogram": ("_bucket", "_count", "_sum")}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (not its functions, labels or keywords)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # range selectors ([5m], [$__rate_interval])
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for match in re.finditer(r"(?<![\w$.])[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if expr[match.end() :].lstrip().startswith("(") or match.group() in PROMQL_KEYWORDS:
            continue  # a function or an aggregation
        names.add(match.group())
    return names


def alert_rules() -> list[dict]:
    return [rule for group in ALERTS["groups"] for rule in group["rules"]]


def dashboard_targets() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in DASHBOARD["panels"]
        for target in panel.get("targets", [])
    ]


def queried_names() -> set[str]:
    expressions = [rule["expr"] for rule in alert_rules()]
    expressions += [expr for _title, expr in dashboard_targets()]
    return set().union(*(metric_names(expr) for expr in expressions))


def exported_sample_names(body: str) -> set[str]:
    """Every sample name /metrics can serve, from its ``# TYPE`` lines (a labelled family
    with no sample yet still has one)."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", body, re.MULTILINE):
        names |= {name + suffix for suffix in SAMPLE_SUFFIXES.get(kind, ("",))}
    return names


def test_metric_names_are_read_from_promql_without_functions_labels_or_keywords():
    expr = (
        'histogram_quantile(0.99, sum by (le, kind) (rate(a_bucket{x="b:c", y=~"d|e"}'
        "[$__rate_interval]))) > 1 and on () (day_of_month() >= max(b_gauge)) "
        "/ ignoring(z) c_total offset 5m"
    )
    assert metric_names(expr) == {"a_bucket", "b_gauge", "c_total"}


@pytest.mark.django_db
def test_every_metric_an_alert_or_a_panel_queries_is_exported_by_metrics(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    exported = exported_sample_names(response.content.decode())

    queried = queried_names()
    assert queried - exported == set()
    # Control: the names are there to be checked, the month start's gauges among them.
    assert {
        "fence_stale_writes_refused_total",
        "fence_epochs_started_total",
        "fence_lock_unavailable_total",
        "fence_lease_overrun_seconds_count",
        "charges_month_start_organizations",
        "charges_month_start_deadline_day",
    } <= queried
    assert "fence_no_such_metric_total" not in exported


# -- alerts -------------------------------------------------------------------------------


def test_every_alert_has_a_severity_a_summary_and_a_description():
    rules = alert_rules()
    assert [rule["alert"] for rule in rules] == [
        "FenceStaleWritesRefused",
        "FenceEpochAfterRedisLostCounters",
        "FenceLockServiceUnavailable",
        "FenceLeasesUncertain",
        "FenceLeasesOverrunTTL",
        "MonthStartNotCompleted",
        "ReporterOutboxStuck",
        "OutsideCallsUnsettled",
    ]
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_alert_has_a_promtool_test_that_fires_it_and_one_that_does_not():
    cases = [
        case
        for test in ALERT_TESTS["tests"]
        for case in test["alert_rule_test"]
    ]  # fmt: skip
    for rule in alert_rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), rule["alert"]
        assert any(not case["exp_alerts"] for case in mine), rule["alert"]
    assert ALERT_TESTS["rule_files"] == ["alerts.yml"]


def test_the_dashboard_panels_each_query_the_templated_prometheus():
    panels = [panel for panel in DASHBOARD["panels"] if panel["type"] != "row"]
    assert len({panel["id"] for panel in DASHBOARD["panels"]}) == len(DASHBOARD["panels"])
    assert DASHBOARD["templating"]["list"][0]["name"] == "datasource"
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


# -- systemd units ------------------------------------------------------------------------


class Unit(dict):
    """A unit file's sections: ``unit["Service"]["ExecStart"]`` is the last value of a key
    (as systemd reads a setting given twice), ``unit.all("Service", key)`` every value."""

    def all(self, section: str, key: str) -> list[str]:
        return self[section].values_of[key]


class Section(dict):
    def __init__(self):
        super().__init__()
        self.values_of: dict[str, list[str]] = {}


def unit(path: Path) -> Unit:
    """Parse a systemd unit file; a line that is no section, key=value or comment fails."""
    parsed, section = Unit(), None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith(("#", ";")):
            continue
        header = re.fullmatch(r"\[(\w+)\]", line)
        if header:
            section = parsed.setdefault(header.group(1), Section())
            continue
        key, sep, value = line.partition("=")
        assert section is not None and sep and re.fullmatch(r"[A-Za-z]+", key), (
            f"{path.name}:{number}: {line!r}"
        )
        section[key] = value
        section.values_of.setdefault(key, []).append(value)
    return parsed


def test_every_scheduled_command_has_a_oneshot_service_and_a_timer_and_nothing_else_does():
    services = {p.stem for p in UNITS.glob("*.service")} - {"hoa-gunicorn@"}
    timers = {p.stem for p in UNITS.glob("*.timer")}
    assert services == timers == set(SCHEDULED)
    for name in SCHEDULED:
        timer = unit(UNITS / f"{name}.timer")
        assert timer["Timer"]["OnCalendar"], name
        assert timer["Install"]["WantedBy"] == "timers.target"
        assert unit(UNITS / f"{name}.service")["Service"]["Type"] == "oneshot"


def test_every_service_runs_a_command_that_exists_with_arguments_it_accepts():
    commands = get_commands()
    for name, command in SCHEDULED.items():
        service = unit(UNITS / f"{name}.service")["Service"]
        assert service["WorkingDirectory"] == "/srv/hoa"
        assert service["EnvironmentFile"] == "/etc/hoa/env"
        program, manage, *args = shlex.split(service["ExecStart"])
        assert (program, manage, args[0]) == ("/srv/hoa/.venv/bin/python", "manage.py", command)
        parser = load_command_class(commands[command], command).create_parser("manage.py", command)
        options = parser.parse_args(args[1:])  # SystemExit on an argument it refuses
        assert options.verbosity == 0, name


def test_the_month_start_runs_daily_at_noon_utc_on_all_associations():
    timer = unit(UNITS / "hoa-month-start.timer")["Timer"]
    assert timer["OnCalendar"] == "*-*-* 12:00:00 UTC"
    assert timer["Persistent"] == "true"
    exec_start = unit(UNITS / "hoa-month-start.service")["Service"]["ExecStart"]
    assert "--all-orgs" in shlex.split(exec_start)


def test_the_payment_run_pays_every_association_daily_after_every_zone_began_its_day():
    timer = unit(UNITS / "hoa-pay-approved-invoices.timer")["Timer"]
    assert timer["OnCalendar"] == "*-*-* 13:00:00 UTC"
    assert timer["Persistent"] == "true"
    exec_start = unit(UNITS / "hoa-pay-approved-invoices.service")["Service"]["ExecStart"]
    assert "--all-orgs" in shlex.split(exec_start)


def test_the_gunicorn_unit_serves_one_instance_per_port_with_the_projects_config():
    service = unit(UNITS / "hoa-gunicorn@.service")
    assert service.all("Service", "Environment") == [
        "PORT=%i",
        "GUNICORN_RUN_DIR=/var/lib/hoa/gunicorn",
    ]
    assert service["Service"]["Type"] == "notify"
    program, *args = shlex.split(service["Service"]["ExecStart"])
    assert program == "/srv/hoa/.venv/bin/gunicorn"
    assert args == ["-c", "/srv/hoa/gunicorn.conf.py"]
    assert (ROOT / "gunicorn.conf.py").is_file()
    assert service["Install"]["WantedBy"] == "multi-user.target"


def test_every_cron_line_of_the_readme_has_its_timer_with_the_same_command():
    blocks = re.findall(r"```cron\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    cron = {
        " ".join(line.split("manage.py ", 1)[1].split())
        for block in blocks
        for line in block.splitlines()
        if "manage.py " in line
    }
    timers = {
        " ".join(unit(UNITS / f"{name}.service")["Service"]["ExecStart"].split()[2:])
        for name in SCHEDULED
    }
    assert cron == timers
    assert len(cron) == len(SCHEDULED)
