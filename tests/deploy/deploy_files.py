"""The deployment files under deploy/ as the tests read them: the PromQL expressions the Grafana dashboard
and the alert rules evaluate, and the metric names those expressions read."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parent.parent.parent / "deploy"
DASHBOARD = DEPLOY / "grafana" / "kvstore.json"
ALERTS = DEPLOY / "prometheus" / "kvstore-alerts.yml"
ALERT_TESTS = DEPLOY / "prometheus" / "kvstore-alerts_test.yml"

# What Grafana puts in place of its variables before it queries (the dashboard's $instance: every master).
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$instance": ".*"}


def dashboard_expressions() -> dict[str, str]:
    """Every query of the dashboard (panels, annotations, variables), by where it is, with Grafana's
    variables replaced as Grafana would."""
    board = json.loads(DASHBOARD.read_text())
    found: dict[str, str] = {}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            found[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    for note in board["annotations"]["list"]:
        found[f"annotation {note['name']!r}"] = note["expr"]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):  # label_values(METRIC, label): the series it reads
            match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query["query"])
            assert match, f"variable {variable['name']}: {query['query']}"
            found[f"variable {variable['name']!r}"] = match.group(1)
    return {where: _with_variables(expr) for where, expr in found.items()}


def _with_variables(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def alert_rules() -> Iterator[dict[str, Any]]:
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        yield from group["rules"]


def rule_expressions() -> dict[str, str]:
    return {f"alert {rule['alert']}": rule["expr"] for rule in alert_rules()}


_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions, keywords, label
    names (inside {} or a by/without/on/ignoring clause), strings, ranges or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = _CLAUSE.sub("", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        if match.group(2) is None and match.group(1).lower() not in _KEYWORDS:
            names.add(match.group(1))
    return names
