"""The driver's own image as its DaemonSet on a real node, and real pods using it.

A real kubelet, containerd 2.x, runc and CNI (``neuron_dra_harness.realnode``) run on this
machine; ``scripts/install-dra-driver.sh`` installs the driver image built by
``scripts/build-image.sh``; the seed examples run as written but for their image (a
busybox one: no registry is reachable), and each container's own output says what it
got: the ``export`` its command runs, and ``kubectl exec`` opening its device nodes.
Where the machine cannot run a node (not root, no runc, no CNI plugins, no umoci or
mmdebstrap) the module is skipped with one line naming what is missing.
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra_harness import scrape
from neuron_dra_harness.realcluster import INSTANCE_TYPE, NODE, RealCluster
from tests import doc_commands
from tests.e2e import realnode_doctor
from tests.e2e.test_cores import visible
from tests.e2e.test_examples import load
from tests.e2e.test_helm import CHART, RELEASE, helm, helm_env, ok, run
from tests.e2e.test_plugin import claim_of, expected_env, namespace, pod_using

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
SPEC = INSTANCE_TYPES[INSTANCE_TYPE]
CHECKPOINT = "plugins/neuron.aws.com/checkpoint.json"
METADATA_DIR = "/var/run/kubernetes.io/dra-device-attributes"
# The seed examples' container command, for the templates that come without a pod.
SEED_COMMAND = {
    "command": ["bash", "-c"],
    "args": ["export; trap 'exit 0' TERM; sleep 9999 & wait"],
}
# Run in the container by `kubectl exec`: every device node, then opened for reading
# and writing, which a node the runtime did not create, or a cgroup that denies it,
# would fail.
OPEN_DEVICES = (
    'for d in /dev/neuron*; do [ -c "$d" ] || continue; : <"$d" && : >"$d" && echo "$d"; done'
)


@pytest.fixture(scope="module")
def token(real: RealCluster) -> str:
    """A scraper's token: the deployed plugin asks for one (metrics.authorization)."""
    return scrape.reader_token(real.cluster, "scraper")


def on_the_node(real: RealCluster, docs: list[Obj]) -> list[Obj]:
    """The example as written, its images replaced by the local test image."""
    out = copy.deepcopy(docs)
    for doc in out:
        if doc["kind"] == "Pod":
            for container in doc["spec"]["containers"]:
                container["image"] = real.busybox.name
                container["imagePullPolicy"] = "Never"
                for key, value in SEED_COMMAND.items():
                    container.setdefault(key, value)
    return out


def create(real: RealCluster, ns: str, docs: list[Obj]) -> None:
    for doc in docs:
        real.cluster.create({**doc, "metadata": {**doc["metadata"], "namespace": ns}})


def exported(log: str) -> dict[str, str]:
    """The NEURON_* variables of busybox sh's `export` output: export NAME='value'."""
    found = re.findall(r"^export (NEURON_\w+)='([^']*)'$", log, flags=re.MULTILINE)
    return dict(found)


def what_the_container_got(
    real: RealCluster, ns: str, pod: str
) -> tuple[dict[str, str], list[str]]:
    """(the NEURON_* environment its shell exported, the device nodes it opened)."""

    def printed() -> str | None:
        text = pod_log(real, ns, pod)
        return text if "export " in text else None

    log = real.cluster.wait_for(f"{pod} to print its environment", printed, 60.0)
    opened = real.cluster.kubectl("exec", "-n", ns, pod, "--", "sh", "-c", OPEN_DEVICES)
    return exported(log), sorted(opened.stdout.split(), key=_number)


def pod_log(real: RealCluster, ns: str, pod: str) -> str:
    return real.cluster.kubectl("logs", "-n", ns, pod, check=False).stdout


def _number(path: str) -> int:
    return int(path.removeprefix("/dev/neuron"))


def expected(claim: Obj, lnc: int | None) -> tuple[dict[str, str], list[str]]:
    """What a container of the claim must get, from its allocation alone."""
    results = claim["status"]["allocation"]["devices"]["results"]
    names = [r["device"] for r in results]
    if all(n.startswith("neurondevice") for n in names):
        devices = sorted(int(n.removeprefix("neurondevice")) for n in names)
        env = expected_env(INSTANCE_TYPE, devices, lnc)
    else:
        cores = sorted(int(n.removeprefix("neuroncore")) for n in names)
        per_device = SPEC.cores_per_device // 2  # the default logical NeuronCore size, 2
        devices = sorted({c // per_device for c in cores})
        env = {"NEURON_RT_VISIBLE_CORES": visible(cores)}
    return env, [f"/dev/neuron{d}" for d in devices]


def metadata_path(pod: Obj, claim: Obj) -> str:
    """Where the container finds the device metadata file of the claim's first request."""
    [pod_claim] = pod["spec"]["resourceClaims"]
    request = claim["spec"]["devices"]["requests"][0]["name"]
    if "resourceClaimTemplateName" in pod_claim:
        where = f"resourceclaimtemplates/{pod_claim['name']}"
    else:
        where = f"resourceclaims/{pod_claim['resourceClaimName']}"
    return f"{METADATA_DIR}/{where}/{request}/neuron.aws.com-metadata.json"


def wait_released(real: RealCluster, ns: str, pod: str, uid: str) -> None:
    """The pod is gone, and with it its claim's CDI spec and checkpoint entry."""
    real.cluster.wait_for_pod_gone(pod, ns, timeout=60)
    real.cluster.wait_for(
        f"the CDI spec of claim {uid} removed",
        lambda: not list(real.node.cdi_dir.glob(f"*{uid}*")),
        30.0,
    )
    assert uid not in (real.node.kubelet_dir / CHECKPOINT).read_text()


def user_pod(real: RealCluster, ns: str, name: str) -> tuple[Obj, str]:
    """A pod of single-device.yaml's template running on the node; (pod, claim uid)."""
    template = next(d for d in load("single-device.yaml") if d["kind"] != "Pod")
    template_name = template["metadata"]["name"]
    docs = [pod_using(name, template_name)]
    existing = real.cluster.get_or_none(
        "resource.k8s.io/v1", "ResourceClaimTemplate", template_name, ns
    )
    if existing is None:
        docs.insert(0, template)
    create(real, ns, on_the_node(real, docs))
    running = real.cluster.wait_for_pod_running(name, ns, timeout=90)
    return running, claim_of(real.cluster, ns, running)["metadata"]["uid"]


def container_id(pod: Obj) -> str:
    [status] = pod["status"]["containerStatuses"]
    return str(status.get("containerID"))


def started_at(pod: Obj) -> str:
    [status] = pod["status"]["containerStatuses"]
    return str(status["state"]["running"]["startedAt"])


def test_install_to_a_running_pod_using_a_device(real: RealCluster, record_property: Any) -> None:
    """The figure an operator meets first: install-dra-driver.sh run to a pod using a
    device Running (measured once per session, from the fixture's install)."""
    ns = namespace(real.cluster)
    pod, uid = user_pod(real, ns, "first")
    seconds = time.monotonic() - real.install_started
    record_property("install_to_running_pod_seconds", round(seconds, 1))
    print(f"install-dra-driver.sh to a Running pod using a device: {seconds:.1f} s")
    assert pod["status"]["phase"] == "Running"
    real.cluster.delete("v1", "Pod", "first", ns)
    wait_released(real, ns, "first", uid)


# (example file, the pod it runs or the template a pod is made for, its NeuronConfig's
# logical NeuronCore size): the examples of a single trn2.48xlarge. The UltraServer
# ones need four nodes and run on simulated nodes (test_plugin, test_examples); the
# inf2 one needs an inf2 node.
EXAMPLES = [
    ("single-device.yaml", "single-device", None),
    ("1x4-connected-devices.yaml", "pod0", None),
    ("lnc-setting-trn2.yaml", "pod0", 1),
    ("all-devices.yaml", "all-devices", None),
    ("xl-trn2.yaml", "template", None),
    ("l-trn2.yaml", "template", None),
    ("2.26-driver-trn2.yaml", "template", None),
    ("single-core.yaml", "single-core", None),
    ("cores-of-one-device.yaml", "cores-of-one-device", None),
]


@pytest.mark.parametrize(("spec_file", "pod", "lnc"), EXAMPLES)
def test_example_pod_gets_exactly_its_devices_and_environment(
    real: RealCluster, spec_file: str, pod: str, lnc: int | None
) -> None:
    ns = namespace(real.cluster)
    docs = load(spec_file)
    if pod == "template":
        [template] = docs
        pod = "user"
        docs = [template, pod_using(pod, template["metadata"]["name"])]
    create(real, ns, on_the_node(real, docs))
    running = real.cluster.wait_for_pod_running(pod, ns, timeout=90)
    claim = claim_of(real.cluster, ns, running)
    env, devices = what_the_container_got(real, ns, pod)
    assert (env, devices) == expected(claim, lnc)
    uid = claim["metadata"]["uid"]
    assert list(real.node.cdi_dir.glob(f"*{uid}*"))
    # The runtime bind-mounted the device metadata file where the pod spec says.
    shown = real.cluster.kubectl("exec", "-n", ns, pod, "--", "cat", metadata_path(running, claim))
    metadata = json.JSONDecoder().raw_decode(shown.stdout)[0]
    assert metadata["metadata"]["uid"] == uid
    real.cluster.delete("v1", "Pod", pod, ns)
    wait_released(real, ns, pod, uid)


def test_driver_pod_runs_as_deployed(real: RealCluster, token: str) -> None:
    """The DaemonSet's pod, with its security context, mounts and probes, is Ready
    (which it says only once the kubelet registered it) and published the node."""
    pod = real.ready_plugin()
    assert pod is not None
    [container] = pod["spec"]["containers"]
    assert container["image"] == real.driver.name
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    registry = real.node.kubelet_dir / "plugins_registry"
    assert [p.name for p in registry.iterdir()] == ["neuron.aws.com-reg.sock"] or any(
        p.name.startswith("neuron.aws.com") for p in registry.iterdir()
    )
    slices = real.cluster.list_objects(
        "resource.k8s.io/v1", "ResourceSlice", field_selector=f"spec.nodeName={NODE}"
    )
    names = {d["name"] for s in slices for d in s["spec"].get("devices") or []}
    assert {f"neurondevice{i}" for i in range(SPEC.devices)} <= names
    # The host mounts are read-only all the way down (recursiveReadOnly), the mounts
    # below /sys (cgroup2 at fs/cgroup) and /dev (shm, mqueue, pts) included.
    mounts = driver_mounts()
    below = {m: o for m, o in mounts.items() if m.startswith(("/host/sys/", "/host/dev/"))}
    assert "/host/sys/fs/cgroup" in below, sorted(mounts)
    writable = sorted(m for m, options in below.items() if "ro" not in options)
    assert not writable, writable
    assert "ro" in mounts["/host/sys"] and "ro" in mounts["/host/dev"]
    # The agent sees the same from inside its container, and says so on its endpoint.
    states = {
        s.labels["state"]: s.value
        for s in scrape.samples(f"http://{pod['status']['podIP']}:9400/metrics", token=token)
        if s.name == "neuron_dra_recursive_readonly_mounts"
    }
    assert states == {"effective": 3, "not_effective": 0}, states


def driver_mounts() -> dict[str, set[str]]:
    """Mount point -> per-mount options, as the driver's container sees them: read on
    the host from /proc/<pid>/mountinfo of the one process that has /host/sys."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            lines = (proc / "mountinfo").read_text().splitlines()
        except OSError:
            continue
        mounts = {f[4]: set(f[5].split(",")) for f in (line.split() for line in lines)}
        if "/host/sys" in mounts:
            return mounts
    raise AssertionError("no process with /host/sys mounted: the driver is not running")


def test_the_documented_exec_commands_run_in_the_plugin_pod(real: RealCluster) -> None:
    """The image carries the offline CLI: the docs' `kubectl exec ... neuron-dra lint -`
    lints the file its shell sends on standard input, in the running plugin pod, and
    `discover` there reads the host's devices through the DaemonSet's /host mounts."""
    ran = doc_commands.run_by(doc_commands.EXEC)
    assert ran
    for command in ran:
        done = realnode_doctor.shell(real, command.text)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        if "discover" in command.argv:
            assert INSTANCE_TYPE in done.stdout and "neurondevice0" in done.stdout, done.stdout
        elif "slices" in command.argv:  # the pod's node's pool, as the plugin publishes it
            pools = {s["spec"]["pool"]["name"] for s in yaml.safe_load_all(done.stdout)}
            assert pools == {NODE}, done.stdout
            assert "neurondevice0" in done.stdout, done.stdout
        else:
            assert done.stdout.strip() == "0 errors, 0 warnings", done.stdout


def test_a_pods_devices_are_attributed_through_the_real_kubelet(
    real: RealCluster, token: str
) -> None:
    """The plugin pod asks the real kubelet's PodResources API (its socket mounted
    read-only) who holds its devices: the user pod's namespace, name and container
    appear on the metrics endpoint while it runs, and leave with it."""
    ns = namespace(real.cluster)
    pod, uid = user_pod(real, ns, "watched")
    plugin = real.ready_plugin()
    assert plugin is not None
    url = f"http://{plugin['status']['podIP']}:9400/metrics"
    [container] = pod["spec"]["containers"]

    def held() -> list[tuple[str, str, str]]:
        return [
            (s.labels["namespace"], s.labels["container"], s.labels["device"])
            for s in scrape.samples(url, token=token)
            if s.name == "neuron_dra_device_allocation_info" and s.labels["pod"] == "watched"
        ]

    [(namespace_, name, device)] = real.cluster.wait_for("the pod on the endpoint", held, 60)
    assert (namespace_, name) == (ns, container["name"])
    assert device.startswith("neurondevice")
    real.cluster.delete("v1", "Pod", "watched", ns)
    wait_released(real, ns, "watched", uid)
    real.cluster.wait_for("the pod gone from the endpoint", lambda: not held(), 60)


def test_kubelet_restart_keeps_running_pods_and_their_claims(real: RealCluster) -> None:
    ns = namespace(real.cluster)
    before, uid = user_pod(real, ns, "survivor")
    env_before = what_the_container_got(real, ns, "survivor")
    real.node.stop_kubelet()
    real.node.start_kubelet()
    real.cluster.wait_for("the plugin pod Ready again", real.ready_plugin, 60.0)
    after = real.cluster.wait_for_pod_running("survivor", ns, timeout=60)
    assert started_at(after) == started_at(before)  # the same container, not a new one
    assert what_the_container_got(real, ns, "survivor") == env_before
    # A new pod after the restart is prepared too; then both are released.
    _, second = user_pod(real, ns, "newcomer")
    for name, claim in (("survivor", uid), ("newcomer", second)):
        real.cluster.delete("v1", "Pod", name, ns)
        wait_released(real, ns, name, claim)


def test_rolling_update_of_the_driver_while_a_claim_is_in_use(real: RealCluster) -> None:
    """maxSurge 1: the new plugin pod starts beside the old one, the old one goes once
    the new one is available; the claim prepared by the old one is unprepared by the
    new one when its pod goes."""
    ns = namespace(real.cluster)
    _, uid = user_pod(real, ns, "during-update")
    [old] = real.plugin_pods()
    stamp = {
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {
                        "kubectl.kubernetes.io/restartedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ")
                    }
                }
            }
        }
    }
    real.cluster.patch("apps/v1", "DaemonSet", "neuron-dra", stamp, "neuron-dra")
    replaced = real.cluster.wait_for(
        "a new plugin pod alone and Ready",
        lambda: (p := real.ready_plugin()) and p["metadata"]["uid"] != old["metadata"]["uid"] and p,
        120.0,
    )
    assert replaced
    assert list(real.node.cdi_dir.glob(f"*{uid}*"))  # still prepared for the running pod
    real.cluster.delete("v1", "Pod", "during-update", ns)
    wait_released(real, ns, "during-update", uid)


def test_a_reboot_clears_the_previous_boots_specs(real: RealCluster) -> None:
    """Power cut with a claim prepared; its pod deleted while the node is down; the
    node boots with a new boot id. The plugin, restarted by the kubelet, removes the
    previous boot's CDI spec and checkpoint entry before anything asks it to."""
    ns = namespace(real.cluster)
    _, uid = user_pod(real, ns, "before-reboot")
    [old] = real.plugin_pods()
    real.node.power_off()
    real.cluster.delete("v1", "Pod", "before-reboot", ns, grace_period=0)
    boot_id = str(uuid.uuid4())
    real.node.power_on(boot_id)

    def restarted() -> Obj | None:
        # The pod's status says Ready until the kubelet is back: wait for a new container.
        pod = real.ready_plugin()
        return pod if pod and container_id(pod) != container_id(old) else None

    plugin = real.cluster.wait_for("the plugin restarted after the reboot", restarted, 120.0)
    assert plugin["metadata"]["uid"] == old["metadata"]["uid"]  # the same pod, restarted
    log = pod_log(real, "neuron-dra", plugin["metadata"]["name"])
    assert "CDI specs of the previous boot removed" in log
    assert not list(real.node.cdi_dir.glob(f"*{uid}*"))
    # The node works after the reboot; the checkpoint is this boot's, without the claim.
    _, fresh = user_pod(real, ns, "after-reboot")
    checkpoint = json.loads((real.node.kubelet_dir / CHECKPOINT).read_text())
    assert checkpoint["bootId"] == boot_id
    assert uid not in json.dumps(checkpoint) and fresh in json.dumps(checkpoint)
    real.cluster.delete("v1", "Pod", "after-reboot", ns)
    wait_released(real, ns, "after-reboot", fresh)


# `neuron-dra doctor` (realnode_doctor): in the plugin's pod and on the host, sound and
# broken one way at a time.
def test_doctor_in_the_plugin_pod_on_a_sound_node(real: RealCluster) -> None:
    realnode_doctor.check_in_the_pod_on_a_sound_node(real)


def test_doctor_on_the_host_broken_one_way_at_a_time(real: RealCluster) -> None:
    realnode_doctor.check_on_the_host_broken_one_way_at_a_time(real)


def test_doctor_on_the_host_fails_without_its_plugin(real: RealCluster) -> None:
    realnode_doctor.check_on_the_host_without_its_plugin(real)


def test_doctor_fails_on_a_deleted_admission_policy(real: RealCluster) -> None:
    realnode_doctor.check_a_deleted_admission_policy(real)


def test_doctor_fails_on_a_plugin_without_its_dra_socket(real: RealCluster) -> None:
    realnode_doctor.check_a_plugin_without_its_dra_socket(real)


def test_the_helm_chart_installs_the_same_driver(
    real: RealCluster, helm_bin: Path, tmp_path: Path
) -> None:
    """Last: the script's installation removed, the chart's in its place with the values
    file of docs/operators/install.md (node selector, tolerations, pull secret, SELinux
    options, annotations, resources, log level), a pod using a device again, the documented
    `helm test` passing with the device and cores its pod got, and `helm uninstall` leaving
    no plugin pod behind."""
    real.install("--uninstall")
    real.cluster.wait_for("the plugin pod gone", lambda: not real.plugin_pods(), 120.0)
    page = (REPO / "docs/operators/install.md").read_text()
    [documented] = re.findall(r"^```yaml\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    values_file = tmp_path / "values.yaml"
    values_file.write_text(documented)
    selector = yaml.safe_load(documented)["nodeSelector"]
    real.cluster.patch("v1", "Node", NODE, {"metadata": {"labels": selector}})
    repository, tag = real.driver.name.rsplit(":", 1)
    values = (
        f"--values={values_file}",
        f"--set=image.repository={repository}",
        f"--set=image.tag={tag}",
    )
    ok(
        helm(
            helm_bin,
            real.cluster,
            "install",
            RELEASE,
            str(CHART),
            "--wait",
            "--timeout=120s",
            "--create-namespace",
            *values,
        )
    )
    real.cluster.wait_for("the chart's plugin pod Ready", real.ready_plugin, 120.0)
    [plugin] = real.plugin_pods()
    spec = plugin["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", **selector}
    assert plugin["metadata"]["annotations"]["example.com/owner"] == "ml-platform"
    assert spec["imagePullSecrets"] == [{"name": "ecr"}]
    [container] = spec["containers"]
    security = container["securityContext"]
    assert security["seLinuxOptions"] == {"type": "spc_t"}
    assert (security["runAsUser"], security["readOnlyRootFilesystem"]) == (0, True)
    assert "--log-level=debug" in container["command"]
    assert "--unhealthy-effect=NoExecute" in container["command"]
    ns = namespace(real.cluster)
    _, uid = user_pod(real, ns, "under-helm")
    real.cluster.delete("v1", "Pod", "under-helm", ns)
    wait_released(real, ns, "under-helm", uid)
    [documented] = doc_commands.run_by(doc_commands.HELM_TEST)
    env = helm_env(real.cluster.workdir, real.cluster.kubeconfig)
    tested = run([str(helm_bin), *documented.argv[1:]], env, cwd=REPO, timeout=180)
    events = real.cluster.kubectl("get", "events", "-n", "neuron-dra", check=False).stdout
    assert tested.returncode == 0, f"{documented}\n{tested.stdout}\n{tested.stderr}\n{events}"
    assert "Phase:          Succeeded" in tested.stdout, tested.stdout
    assert re.search(r"^devices: neuron\d+$", tested.stdout, re.MULTILINE), tested.stdout
    assert re.search(r"^NEURON_RT_VISIBLE_CORES=\d+(-\d+)?$", tested.stdout, re.MULTILINE)
    ok(helm(helm_bin, real.cluster, "uninstall", RELEASE, "--wait", "--timeout=120s"))
    # The namespace is the operator's and stays; the DaemonSet's pods go after it.
    real.cluster.wait_for("the chart's plugin pod gone", lambda: not real.plugin_pods(), 120.0)
