"""The chart's monitoring objects, checked by the programs that read them.

``metrics.serviceMonitor``, ``metrics.prometheusRule`` and ``metrics.grafanaDashboard``
render a ServiceMonitor, a PrometheusRule and a dashboard ConfigMap. The alert rules
(``rules/neuron-dra.rules.yaml``) and the dashboard (``dashboards/neuron-dra.json``) are
files of the chart, so that promtool, built from its Go module like helm
(``neuron_dra_harness.build``), checks the very files the chart ships: ``check rules`` on the
rules and on every dashboard query, ``test rules`` with ``neuron-dra.rules.test.yaml``
(each alert fires on the series that should fire it and stays quiet otherwise) and with
the dashboard's join of allocations to power and memory. Every metric they use is one
the agent exposes (``neuron_dra.agent.telemetry.metrics.METRICS``), every label one its series
carry, as Prometheus's own PromQL parser reads them (``promqlnames``, built beside
promtool). The rendered objects go to an API server (minimal CRDs for the Prometheus
Operator's kinds) in a server-side dry run.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from neuron_dra.agent.telemetry.metrics import METRICS
from neuron_dra_harness.build import Binaries, prometheus_release, promtool_module_version
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.manifests import install_monitoring_crds
from tests import doc_commands
from tests.e2e.test_helm import CHART, IMAGE_VALUES, RELEASE, by_key, helm_env, ok, run, template
from tests.test_docs import anchors

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
RULES = CHART / "rules" / "neuron-dra.rules.yaml"
DASHBOARD = CHART / "dashboards" / "neuron-dra.json"
RULE_TESTS = Path(__file__).resolve().parent / "neuron-dra.rules.test.yaml"
Obj = dict[str, Any]

# The job of the ServiceMonitor's targets: the Prometheus Operator names it after the
# Service (no jobLabel). The rules' `up` selects it.
SCRAPE_JOB = "neuron-dra-metrics"
# Labels the agent's series carry, `le` of its histograms, and those of a ServiceMonitor
# target that the queries use.
KNOWN_LABELS = {
    "node",
    "neuron_device",
    "device",
    "serial_number",
    "namespace",
    "pod",
    "container",
    "claim",
    "health",
    "state",
    "phase",
    "reason",
    "kind",
    "status",
    "memory",
    "le",
    "job",
    "instance",
}
# Grafana's variables as a query reaches Prometheus; any other `$` fails the parse check.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$node": ".*"}
MONITORING_VALUES = (
    "--set=metrics.serviceMonitor.enabled=true",
    "--set=metrics.prometheusRule.enabled=true",
    "--set=metrics.grafanaDashboard.enabled=true",
)


def exposed_names() -> set[str]:
    """Every series name the agent exposes, and the scrape's own `up`."""
    names = {"up"}
    for name, spec in METRICS.items():
        if spec.kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def rules() -> list[Obj]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard() -> Obj:
    return cast(Obj, json.loads(DASHBOARD.read_text()))


def dashboard_targets() -> list[tuple[Obj, Obj]]:
    """(panel, target) of every query of the dashboard."""
    return [(p, t) for p in dashboard()["panels"] for t in p.get("targets", [])]


def as_sent(expr: str) -> str:
    """The query with Grafana's variables filled in, as Prometheus receives it."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def uses(promtool_bin: Path, exprs: list[str]) -> list[tuple[set[str], set[str]]]:
    """The metric names and label names each PromQL expression uses, read by Prometheus's
    own parser (`promqlnames`, built beside promtool); an expression that does not parse
    fails the test with the parser's message."""
    done = subprocess.run(
        [str(promtool_bin.with_name("promqlnames"))],
        input=json.dumps(exprs),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [(set(n["metrics"]), set(n["labels"])) for n in json.loads(done.stdout)]


def test_uses_reads_names_and_labels(promtool_bin: Path) -> None:
    [(metrics, labels)] = uses(
        promtool_bin,
        [
            'max by (node) (rate(a_total{node=~".*", x="{y}"}[5m] offset 10m)) '
            "* on(node) group_left(z) b > 0 unless c"
        ],
    )
    assert (metrics, labels) == ({"a_total", "b", "c"}, {"node", "x", "z"})
    with pytest.raises(AssertionError, match="unknown function"):
        uses(promtool_bin, ["sum(rte(a[5m]))"])


# ------------------------------------------------------------------ promtool


def promtool(promtool_bin: Path, *args: str) -> str:
    done = subprocess.run(
        [str(promtool_bin), *args], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_promtool_is_the_pinned_release(promtool_bin: Path) -> None:
    out = promtool(promtool_bin, "--version")
    assert f"promtool, version {prometheus_release(promtool_module_version())} " in out


def test_the_rules_file_is_valid(promtool_bin: Path) -> None:
    out = promtool(promtool_bin, "check", "rules", str(RULES))
    assert f"SUCCESS: {len(rules())} rules found" in out


def test_each_alert_fires_and_stays_quiet(promtool_bin: Path) -> None:
    """`promtool test rules`: labels, annotations as rendered, `for` and the queries."""
    assert "SUCCESS" in promtool(promtool_bin, "test", "rules", str(RULE_TESTS))
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    for rule in rules():
        name = rule["alert"]
        assert any(c["alertname"] == name and c["exp_alerts"] for c in cases), f"{name} never fires"
        assert any(c["alertname"] == name and not c["exp_alerts"] for c in cases), (
            f"{name} is never shown quiet"
        )


def test_the_documented_promtool_commands_run(promtool_bin: Path) -> None:
    """As written, from the repository root, with the pinned promtool."""
    ran = doc_commands.run_by(doc_commands.PROMTOOL)
    assert ran
    for command in ran:
        done = subprocess.run(
            [str(promtool_bin), *command.argv[1:]],
            cwd=REPO,
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (str(command), done.stdout, done.stderr)


def test_every_dashboard_query_parses(promtool_bin: Path, tmp_path: Path) -> None:
    """Each query as a recording rule: `promtool check rules` parses it as Prometheus does."""
    records = [
        {
            "record": f"dashboard:panel_{panel['id']}_{target['refId']}",
            "expr": as_sent(target["expr"]),
        }
        for panel, target in dashboard_targets()
    ]
    assert len(records) >= 20
    for record in records:
        assert "$" not in record["expr"], f"a Grafana variable left in {record['expr']!r}"
    checked = tmp_path / "dashboard.rules.yaml"
    checked.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    assert f"SUCCESS: {len(records)} rules found" in promtool(
        promtool_bin, "check", "rules", str(checked)
    )


def _panel(title: str) -> Obj:
    [found] = [p for p in dashboard()["panels"] if p["title"] == title]
    return cast(Obj, found)


def test_the_allocation_table_joins_power_and_memory(promtool_bin: Path, tmp_path: Path) -> None:
    """The table's three queries on series as the agent exposes them: one row per container
    and device, the power and memory of its physical device beside it, a device nobody
    holds left out, and a plugin pod's rollover (two targets for one device) no error."""
    table = _panel("Which pod holds which device")
    queries = {t["refId"]: as_sent(t["expr"]) for t in table["targets"]}
    holders = [
        ("n1", "3", "neurondevice3", "team-a", "train-0", "main", "claim-a"),
        ("n1", "3", "neuroncore12", "team-b", "infer-0", "server", "claim-b"),
        ("n2", "0", "neurondevice0", "team-a", "train-1", "main", "claim-c"),
    ]
    keys = ("node", "neuron_device", "device", "namespace", "pod", "container", "claim")

    def labels(values: tuple[str, ...], **more: str) -> str:
        pairs = {**dict(zip(keys, values, strict=True)), "serial_number": "SN-" + values[0]}
        pairs |= more
        return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"

    target = {"job": "neuron-dra-metrics", "instance": "10.0.0.1:9400"}
    series = [
        {"series": "neuron_dra_device_allocation_info" + labels(h, **target), "values": "1x5"}
        for h in holders
    ]
    per_device = {("n1", "3"): (0.5, 2e9), ("n1", "4"): (0.1, 1e9), ("n2", "0"): (0.25, 3e9)}
    for (node, index), (power, memory) in per_device.items():
        for instance in ("10.0.0.1:9400", "10.0.0.2:9400") if node == "n1" else ("10.0.0.3:9400",):
            where = f'{{node="{node}",neuron_device="{index}",instance="{instance}",pod="p"}}'
            series += [
                {"series": f"neuron_dra_device_power_draw_ratio{where}", "values": f"{power}x5"},
                {"series": f"neuron_dra_device_memory_used_bytes{where}", "values": f"{memory}x5"},
            ]
    expected = {
        "A": [1.0, 1.0, 1.0],
        "B": [per_device[h[:2]][0] for h in holders],
        "C": [per_device[h[:2]][1] for h in holders],
    }
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {
                    "expr": queries[ref],
                    "eval_time": "2m",
                    "exp_samples": [
                        {"labels": labels(h), "value": v}
                        for h, v in zip(holders, values, strict=True)
                    ],
                }
                for ref, values in expected.items()
            ],
        }
    ]
    test_file = tmp_path / "allocation.test.yaml"
    test_file.write_text(yaml.safe_dump({"rule_files": [], "tests": tests}))
    assert "SUCCESS" in promtool(promtool_bin, "test", "rules", str(test_file))


# ------------------------------------------------------------ offline checks


def documented_queries() -> list[tuple[str, str]]:
    """(page, query) of every ```promql block of the docs."""
    fence = re.compile(r"^```promql\n(.*?)^```", re.MULTILINE | re.DOTALL)
    return [
        (str(page.relative_to(REPO)), query.strip())
        for page in sorted((REPO / "docs").rglob("*.md"))
        for query in fence.findall(page.read_text())
    ]


def test_every_documented_query_parses_and_names_what_is_exposed(
    promtool_bin: Path, tmp_path: Path
) -> None:
    queries = documented_queries()
    assert len(queries) >= 4  # the per-pod questions of health-and-metrics.md at least
    records = [{"record": f"docs:query_{i}", "expr": q} for i, (_, q) in enumerate(queries)]
    checked = tmp_path / "docs.rules.yaml"
    checked.write_text(yaml.safe_dump({"groups": [{"name": "docs", "rules": records}]}))
    assert f"SUCCESS: {len(records)} rules found" in promtool(
        promtool_bin, "check", "rules", str(checked)
    )
    found = uses(promtool_bin, [query for _, query in queries])
    for (page, _), (metrics, labels) in zip(queries, found, strict=True):
        assert metrics <= exposed_names(), f"{page}: {sorted(metrics - exposed_names())}"
        assert labels <= KNOWN_LABELS, f"{page}: {sorted(labels - KNOWN_LABELS)}"


def test_the_documented_per_pod_question_is_answered(promtool_bin: Path, tmp_path: Path) -> None:
    """ "Which pod uses neurondevice3 on ip-10-0-1-7 and how hot is it", as the docs ask it,
    on series as the agent exposes them: one answer, its pod's labels and its power."""
    [(_, query)] = [q for q in documented_queries() if 'device="neurondevice3"' in q[1]]
    held = {
        "node": "ip-10-0-1-7",
        "neuron_device": "3",
        "device": "neurondevice3",
        "serial_number": "0a1b2c3d00000003",
        "namespace": "ml",
        "pod": "train-0",
        "container": "main",
        "claim": "neurons",
    }

    def selector(name: str, labels: dict[str, str]) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    device = {"node": "ip-10-0-1-7", "neuron_device": "3"}
    other = {"node": "ip-10-0-1-7", "neuron_device": "4"}
    series = [
        {"series": selector("neuron_dra_device_allocation_info", held), "values": "1x5"},
        {"series": selector("neuron_dra_device_power_draw_ratio", device), "values": "0.42x5"},
        {"series": selector("neuron_dra_device_power_draw_ratio", other), "values": "0.9x5"},
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {
                    "expr": query,
                    "eval_time": "2m",
                    "exp_samples": [{"labels": selector("", held), "value": 0.42}],
                }
            ],
        }
    ]
    test_file = tmp_path / "question.test.yaml"
    test_file.write_text(yaml.safe_dump({"rule_files": [], "tests": tests}))
    assert "SUCCESS" in promtool(promtool_bin, "test", "rules", str(test_file))


def test_every_metric_and_label_used_is_exposed(promtool_bin: Path) -> None:
    """A metric the agent does not expose, or a label its series lack, shows nothing on the
    dashboard and never fires an alert; neither says so."""
    exprs = [rule["expr"] for rule in rules()]
    exprs += [as_sent(t["expr"]) for _, t in dashboard_targets()]
    used_metrics: set[str] = set()
    used_labels: set[str] = set()
    for metrics, labels in uses(promtool_bin, exprs):
        used_metrics |= metrics
        used_labels |= labels
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["definition"])
            assert found is not None, variable["definition"]
            used_metrics.add(found[1])
            used_labels.add(found[2])
    for _, target in dashboard_targets():
        used_labels |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target["legendFormat"]))
    assert used_labels <= KNOWN_LABELS, sorted(used_labels - KNOWN_LABELS)
    missing = sorted(used_metrics - exposed_names())
    assert not missing, f"not in neuron_dra.agent.telemetry.metrics.METRICS: {missing}"


def test_each_alert_says_where_and_what_to_do() -> None:
    page = REPO / "docs" / "operators" / "dashboards-and-alerts.md"
    for rule in rules():
        name, annotations = rule["alert"], rule["annotations"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        path, _, anchor = annotations["runbook_url"].partition("#")
        assert (REPO / path) == page and anchor in anchors(page), name
        assert anchor == name.lower(), name
        if "absent(" not in rule["expr"]:
            for text in (annotations["summary"], annotations["description"]):
                assert "{{ $labels.node }}" in text, name
    assert "up{job=" + json.dumps(SCRAPE_JOB) + "} == 0" in [r["expr"] for r in rules()]


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    board = dashboard()
    assert (board["uid"], board["title"]) == ("neuron-dra", "Neuron DRA")
    assert board["schemaVersion"] == 39
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == (
        "datasource",
        "prometheus",
    )
    assert variables["node"]["multi"] and variables["node"]["includeAll"]
    source = {"type": "prometheus", "uid": "${datasource}"}
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == source and panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(t["datasource"] == source for t in panel["targets"]), panel["title"]
    titles = {p["title"] for p in board["panels"]}
    assert titles >= {
        "Devices by health and state",
        "Which pod holds which device",
        "Power draw per device",
        "Device memory used",
        "Executions by status",
        "ECC errors",
        "Prepare and unprepare latency",
        "Prepare and unprepare errors by reason",
        "Registered",
        "Devices without a health source",
        "PodResources API up",
    }


# --------------------------------------------------------------------- helm


@pytest.fixture(scope="module")
def offline(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return helm_env(tmp_path_factory.mktemp("helm-home"))


def test_the_chart_renders_the_monitoring_objects(helm_bin: Path, offline: dict[str, str]) -> None:
    objects = by_key(
        template(
            helm_bin,
            offline,
            *IMAGE_VALUES,
            *MONITORING_VALUES,
            "--namespace=drivers",
            "--set=metrics.serviceMonitor.interval=15s",
            "--set=metrics.serviceMonitor.labels.release=prometheus",
            "--set=metrics.prometheusRule.labels.release=prometheus",
            "--set=metrics.grafanaDashboard.namespace=monitoring",
            "--set=metrics.grafanaDashboard.annotations.grafana_folder=Neuron",
        )
    )
    service = objects[("Service", SCRAPE_JOB)]
    monitor = objects[("ServiceMonitor", "neuron-dra")]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "drivers"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    spec = monitor["spec"]
    assert "jobLabel" not in spec  # the job is the Service's name, which the rules select
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert spec["namespaceSelector"] == {"matchNames": ["drivers"]}
    [endpoint] = spec["endpoints"]
    assert [p["name"] for p in service["spec"]["ports"]] == [endpoint["port"]] == ["metrics"]
    assert (endpoint["honorLabels"], endpoint["interval"], endpoint["path"]) == (
        True,
        "15s",
        "/metrics",
    )
    assert endpoint["relabelings"] == [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": "node",
        }
    ]

    rule = objects[("PrometheusRule", "neuron-dra")]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == {"groups": yaml.safe_load(RULES.read_text())["groups"]}

    config_map = objects[("ConfigMap", "neuron-dra-dashboard")]
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Neuron"}
    assert json.loads(config_map["data"]["neuron-dra.json"]) == dashboard()

    lint = [str(helm_bin), "lint", "--strict", str(CHART), *IMAGE_VALUES, *MONITORING_VALUES]
    assert "0 chart(s) failed" in ok(run(lint, offline))


def test_the_monitoring_values_shape_the_objects(helm_bin: Path, offline: dict[str, str]) -> None:
    objects = by_key(
        template(
            helm_bin,
            offline,
            *IMAGE_VALUES,
            *MONITORING_VALUES,
            "--set=metrics.prometheusRule.runbookBaseURL=https://example.com/neuron-dra/blob/v1/",
            "--set=metrics.grafanaDashboard.label=dashboards,metrics.grafanaDashboard.labelValue=on",
        )
    )
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for group in groups:
        for rule in group["rules"]:
            path = rule["annotations"]["runbook_url"]
            rule["annotations"]["runbook_url"] = f"https://example.com/neuron-dra/blob/v1/{path}"
    assert objects[("PrometheusRule", "neuron-dra")]["spec"] == {"groups": groups}
    config_map = objects[("ConfigMap", "neuron-dra-dashboard")]
    assert config_map["metadata"]["namespace"] == "neuron-dra"  # helm_env's, as none is given
    assert config_map["metadata"]["labels"]["dashboards"] == "on"
    assert "grafana_dashboard" not in config_map["metadata"]["labels"]
    # Off by default: none of the three (test_helm.py's test_defaults lists every kind).
    kinds = {kind for kind, _ in by_key(template(helm_bin, offline, *IMAGE_VALUES))}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "ConfigMap"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            ("--set=metrics.serviceMonitor.interval=half-minute",),
            "at '/metrics/serviceMonitor/interval': 'half-minute' does not match pattern",
        ),
        (
            ("--set=metrics.serviceMonitor.honorLabels=false",),
            "at '/metrics/serviceMonitor': additional properties 'honorLabels' not allowed",
        ),
        (
            ("--set=metrics.prometheusRule.runbookBaseURL=example.com",),
            "at '/metrics/prometheusRule/runbookBaseURL': 'example.com' does not match pattern",
        ),
        (
            ("--set=metrics.grafanaDashboard.namespace=Monitoring",),
            "at '/metrics/grafanaDashboard/namespace': 'Monitoring' does not match pattern",
        ),
        (
            ("--set=metrics.serviceMonitor.enabled=true", "--set=metrics.service.enabled=false"),
            "metrics.serviceMonitor.enabled needs metrics.enabled and metrics.service.enabled",
        ),
    ],
)
def test_bad_monitoring_values_are_refused(
    helm_bin: Path, offline: dict[str, str], values: tuple[str, ...], message: str
) -> None:
    args = [str(helm_bin), "template", RELEASE, str(CHART), *IMAGE_VALUES, *values]
    result = run(args, offline)
    assert result.returncode == 1 and message in result.stderr, result.stderr


# ------------------------------------------------------------ the API server


@pytest.fixture(scope="module")
def cluster(e2e_binaries: Binaries) -> Iterator[Cluster]:
    with Cluster(e2e_binaries) as running:
        install_monitoring_crds(running)
        yield running


def test_the_server_accepts_the_monitoring_objects(helm_bin: Path, cluster: Cluster) -> None:
    env = helm_env(cluster.workdir, cluster.kubeconfig)
    rendered = ok(
        run(
            [
                str(helm_bin),
                "template",
                RELEASE,
                str(CHART),
                *IMAGE_VALUES,
                *MONITORING_VALUES,
                # A namespace the bare API server has.
                "--namespace=default",
                "--set=allowDefaultNamespace=true",
                "--show-only=templates/servicemonitor.yaml",
                "--show-only=templates/prometheusrule.yaml",
                "--show-only=templates/dashboard.yaml",
            ],
            env,
        )
    )
    kubectl = [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
    applied = ok(
        run(
            [
                *kubectl,
                "apply",
                "--server-side",
                "--dry-run=server",
                "--field-manager=dry-run-check",
                "-f",
                "-",
            ],
            env,
            stdin=rendered,
        )
    )
    assert sorted(applied.splitlines()) == [
        "configmap/neuron-dra-dashboard serverside-applied (server dry run)",
        "prometheusrule.monitoring.coreos.com/neuron-dra serverside-applied (server dry run)",
        "servicemonitor.monitoring.coreos.com/neuron-dra serverside-applied (server dry run)",
    ]
