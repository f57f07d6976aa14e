"""deploy/: the Prometheus alert rules and the Grafana dashboard parse, and
every metric they query is one loom serve declares (no exporter names)."""
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy/prometheus/alerts.yml"
DASHBOARD = ROOT / "deploy/grafana/loom-dashboard.json"


def declared_metrics():
    """Series names loom serve can export: declare_* calls in src/server."""
    names = set()
    for src in (ROOT / "src/server").glob("*.cpp"):
        text = src.read_text()
        for kind, name in re.findall(r'declare_(counter|gauge|histogram)\(\s*"(loom_\w+)"', text):
            names.add(name)
            if kind == "histogram":
                names.update({name + "_bucket", name + "_sum", name + "_count"})
    assert "loom_gpu_utilization_ratio" in names and "loom_request_queue_time_seconds" in names
    return names


def metric_names(expr):
    # Identifiers that are series (not functions, label names or keywords):
    # anything that looks like a metric, i.e. has an underscore-separated
    # lower-case or upper-case exporter prefix.
    return set(re.findall(r"\b([a-zA-Z_]+_[a-zA-Z0-9_]*)\b(?=\s*[{\[)<>=!]|\s*$|\s+(?:and|or|unless|[<>]))", expr))


def check_expr(expr, declared):
    names = {n for n in metric_names(expr) if not n.startswith("__")}
    assert names, f"no metric in {expr!r}"
    for n in names:
        assert n.startswith("loom_"), f"{n} in {expr!r} is not a loom metric"
        assert n in declared, f"{n} in {expr!r} is not declared by loom serve"


def test_alerts_parse_and_use_loom_metrics():
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(ALERTS.read_text())
    declared = declared_metrics()
    rules = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    for rule in rules.values():
        check_expr(rule["expr"], declared)
    under, over = rules["LoomGpuUnderutilised"], rules["LoomGpuSaturated"]
    assert "loom_gpu_utilization_ratio" in under["expr"] and "< 0.30" in under["expr"]
    assert "loom_gpu_utilization_ratio" in over["expr"] and "> 0.95" in over["expr"]
    assert under["for"] == "5m" and over["for"] == "5m"
    queue = rules["LoomQueueGrowing"]
    assert "deriv(loom_num_requests_waiting" in queue["expr"]


def test_dashboard_parses_and_uses_loom_metrics():
    doc = json.loads(DASHBOARD.read_text())
    declared = declared_metrics()
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert exprs
    for e in exprs:
        check_expr(e, declared)
    used = set().union(*(metric_names(e) for e in exprs))
    for needed in ("loom_gpu_utilization_ratio", "loom_gpu_memory_used_bytes",
                   "loom_request_queue_time_seconds_bucket", "loom_num_requests_waiting",
                   "loom_tenant_tokens_total", "loom_tenant_requests_total"):
        assert needed in used, needed
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_metric_name_extraction():
    assert metric_names('sum(rate(loom_x_total{a="b"}[5m])) > 1') == {"loom_x_total"}
    assert metric_names("avg by (instance, gpu) (DCGM_FI_DEV_GPU_UTIL) < 30") == {"DCGM_FI_DEV_GPU_UTIL"}
    assert metric_names("loom_engine_stalled == 1") == {"loom_engine_stalled"}
    with pytest.raises(AssertionError):
        check_expr("avg(DCGM_FI_DEV_GPU_UTIL) < 30", {"loom_a"})
