"""The scrape job that docs/operators/dashboards-and-alerts.md gives for a Prometheus
without the Operator: promtool takes it, and it scrapes what the chart's ServiceMonitor
does, under the job the alerts select, with the same `node` and honored labels. The
install page's values file leads there, not to pod annotations, which give neither."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_helm import IMAGE_VALUES, by_key, offline, template
from tests.e2e.test_monitoring import MONITORING_VALUES, SCRAPE_JOB, promtool

pytestmark = pytest.mark.e2e
__all__ = ["offline"]  # the fixture, shared with test_helm

REPO = Path(__file__).resolve().parents[2]
OPERATORS = REPO / "docs/operators"
SECTION = "### Without the Prometheus Operator"


def documented_job() -> dict[str, Any]:
    page = (OPERATORS / "dashboards-and-alerts.md").read_text()
    section = page.split(SECTION, 1)[1].split("\n#", 1)[0]
    [block] = re.findall(r"^```yaml\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    [job] = yaml.safe_load(block)["scrape_configs"]
    return dict(job)


def test_promtool_takes_the_documented_job(promtool_bin: Path, tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [documented_job()]}))
    assert "SUCCESS" in promtool(promtool_bin, "check", "config", str(config))


def test_the_job_scrapes_as_the_service_monitor_does(
    helm_bin: Path, offline: dict[str, str]
) -> None:
    job = documented_job()
    assert job["job_name"] == SCRAPE_JOB
    objects = by_key(template(helm_bin, offline, *IMAGE_VALUES, *MONITORING_VALUES))
    endpoint = objects[("ServiceMonitor", "neuron-dra")]["spec"]["endpoints"][0]
    assert job["honor_labels"] is endpoint["honorLabels"] is True
    [to_node] = endpoint["relabelings"]
    assert {
        "source_labels": to_node["sourceLabels"],
        "target_label": to_node["targetLabel"],
    } in job["relabel_configs"]
    # The keep rule matches the plugin pods' name label and their port's name.
    daemonset = objects[("DaemonSet", "neuron-dra")]
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [
        daemonset["metadata"]["namespace"]
    ]
    pod = daemonset["spec"]["template"]
    [container] = pod["spec"]["containers"]
    [keep] = [rule for rule in job["relabel_configs"] if rule.get("action") == "keep"]
    assert keep["source_labels"] == [
        "__meta_kubernetes_pod_label_app_kubernetes_io_name",
        "__meta_kubernetes_pod_container_port_name",
    ]
    value = f"{pod['metadata']['labels']['app.kubernetes.io/name']};{endpoint['port']}"
    assert re.fullmatch(keep["regex"], value), (keep, value)
    assert endpoint["port"] in {port["name"] for port in container["ports"]}


def test_the_install_values_do_not_scrape_by_annotation() -> None:
    page = (OPERATORS / "install.md").read_text()
    [values] = re.findall(r"^```yaml\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    annotations = yaml.safe_load(values).get("podAnnotations", {})
    assert not [name for name in annotations if name.startswith("prometheus.io/")]
    assert "dashboards-and-alerts.md#without-the-prometheus-operator" in page
