"""deploy/prometheus's alert rules are valid for Prometheus (`promtool check rules`), pass their unit tests
(`promtool test rules`), and every alert has a unit test in which it fires; its example configuration is
valid (`promtool check config`)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.deploy.conftest import require_tool
from tests.deploy.deploy_files import ALERT_TESTS, ALERTS, alert_rules


@pytest.mark.prometheus
def test_promtool_checks_the_rules() -> None:
    promtool = require_tool("promtool", "Debian's prometheus")
    done = subprocess.run([promtool, "check", "rules", ALERTS.name], cwd=ALERTS.parent, capture_output=True)
    out = (done.stdout + done.stderr).decode()
    assert done.returncode == 0, out
    assert f"SUCCESS: {len(list(alert_rules()))} rules found" in out, out


@pytest.mark.prometheus
def test_promtool_checks_the_example_configuration() -> None:
    promtool = require_tool("promtool", "Debian's prometheus")
    config = ALERTS.parent / "prometheus.yml"
    done = subprocess.run([promtool, "check", "config", config.name], cwd=config.parent, capture_output=True)
    out = (done.stdout + done.stderr).decode()
    assert done.returncode == 0 and "is valid prometheus config file" in out, out


@pytest.mark.prometheus
def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    promtool = require_tool("promtool", "Debian's prometheus")
    done = subprocess.run(
        [promtool, "test", "rules", ALERT_TESTS.name], cwd=ALERT_TESTS.parent, capture_output=True
    )
    out = (done.stdout + done.stderr).decode()
    assert done.returncode == 0 and "SUCCESS" in out, out


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    cases = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    alerts = {rule["alert"] for rule in alert_rules()}
    assert alerts - fired == set(), "alerts no unit test fires"
    assert fired <= alerts
    for rule in alert_rules():
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
