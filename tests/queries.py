"""The PromQL that deploy/ carries: the metric names an expression selects, and the Grafana dashboard's queries.
Shared by the dashboard's tests (tests/test_deploy.py) and the alerts' (tests/test_alert_rules.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]

PROMQL_FUNCTIONS = {
    # aggregations
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "limitk", "limit_ratio",
    # functions
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "day_of_month",
    "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev", "histogram_stdvar",
    "histogram_sum", "hour", "idelta", "increase", "irate", "label_join", "label_replace", "ln", "log2",
    "log10", "minute", "month", "predict_linear", "rate", "resets", "round", "scalar", "sgn", "sort",
    "sort_desc", "sort_by_label", "sort_by_label_desc", "sqrt", "time", "timestamp", "vector", "year",
    "avg_over_time", "min_over_time", "max_over_time", "sum_over_time", "count_over_time",
    "quantile_over_time", "stddev_over_time", "stdvar_over_time", "last_over_time", "present_over_time",
    "mad_over_time",
}  # fmt: skip
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
                "group_right", "inf", "nan", "Inf", "NaN"}  # fmt: skip


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana variables allowed in matchers and ranges)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\{[^{}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges and subqueries
    s = re.sub(r"\$\{[^}]*\}|\$\w+", " ", s)  # Grafana variables left outside matchers
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names: set[str] = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        token = m.group(0)
        before = s[m.start() - 1] if m.start() else " "
        if before.isdigit() or before == ".":
            continue  # a duration or number suffix: 5m, 1e3
        if s[m.end() :].lstrip().startswith("("):
            assert token in PROMQL_FUNCTIONS, f"unknown PromQL function {token} in {expr}"
            continue
        if token not in PROMQL_WORDS:
            names.add(token)
    return names


def dashboard_panels(doc: Obj) -> Iterator[Obj]:
    for panel in doc["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(doc: Obj) -> list[str]:
    exprs = [t["expr"] for p in dashboard_panels(doc) for t in p.get("targets", [])]
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", query)
            assert m is not None, f"variable {var['name']}: only label_values(selector, label) is used"
            exprs.append(m.group(1))
    return exprs
