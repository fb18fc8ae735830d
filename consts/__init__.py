"""Every name the driver publishes or reads from its environment, in one place.

Attribute, label and environment names are part of the driver's contract with
ResourceClaimTemplates, node selectors and container runtimes: changing one is
a breaking change, so each lives here exactly once with its meaning.
"""

from typing import Final

# --- Driver identity -------------------------------------------------------

DRIVER_NAME: Final = "neuron.aws.com"
"""DRA driver name: ResourceSlice spec.driver, DeviceClass name, opaque config driver."""

ATTRIBUTE_DOMAIN: Final = DRIVER_NAME
"""Domain of the driver's own attributes; short names in CEL resolve here."""

GROUP_ATTRIBUTE_DOMAIN: Final = "resource.aws.com"
"""Domain shared with the AWS EFA driver for connected-device-group ids."""

KUBERNETES_ATTRIBUTE_DOMAIN: Final = "resource.kubernetes.io"
"""Domain of attributes standardised by Kubernetes (e.g. pcieRoot)."""

DRA_DRIVER_VERSION: Final = "0.1.0"
"""Semantic version of this driver, published as draDriverVersion."""

# --- Device names ------------------------------------------------------------

DEVICE_NAME_PREFIX: Final = "neurondevice"
"""ResourceSlice device name prefix: neurondevice0, neurondevice1, ..."""

NODE_DEVICE_NAME: Final = "neuronnode"
"""ResourceSlice device standing for a whole UltraServer node."""

CORE_NAME_PREFIX: Final = "neuroncore"
"""ResourceSlice device name prefix of a logical NeuronCore, then its host-global number."""

# --- Attributes (short names, domain ATTRIBUTE_DOMAIN) ----------------------

ATTR_DEVICE_ID: Final = "deviceId"
"""int: device index N of /dev/neuronN."""

ATTR_INSTANCE_TYPE: Final = "instanceType"
"""string: EC2 instance type, e.g. trn2.48xlarge."""

ATTR_NEURON_DRIVER_VERSION: Final = "neuronDriverVersion"
"""string: Neuron kernel driver version; four parts, so compared as a string."""

ATTR_DRA_DRIVER_VERSION: Final = "draDriverVersion"
"""version: semantic version of this DRA driver."""

ATTR_RESOURCE_TYPE: Final = "resourceType"
"""string: RESOURCE_TYPE_DEVICE, RESOURCE_TYPE_NODE or RESOURCE_TYPE_CORE."""

ATTR_CORE_ID: Final = "coreId"
"""int: a logical NeuronCore's host-global number, as NEURON_RT_VISIBLE_CORES gives it."""

ATTR_TOPOLOGY_X: Final = "topology_x"
"""int: torus row of the device (multi-device Trainium)."""

ATTR_TOPOLOGY_Y: Final = "topology_y"
"""int: torus column of the device (multi-device Trainium)."""

ATTR_TOPOLOGY4_ID: Final = "topology4_id"
"""int: index of the device's connected set of 4 (a torus row or ring block)."""

ATTR_TOPOLOGY8_ID: Final = "topology8_id"
"""int: index of the device's connected set of 8 (a torus half or ring block)."""

ATTR_LOGICAL_NEURON_CORE: Final = "logicalNeuronCore"
"""int: node default logical NeuronCore size (1 or 2), on hardware with LNC only."""

ATTR_SERIAL_NUMBER: Final = "serialNumber"
"""string: device serial number as the Neuron driver reports it."""

ATTR_DEVICE_NAME: Final = "deviceName"
"""string: silicon name as the Neuron driver reports it, e.g. Trainium2."""

ATTR_ULTRASERVER_SERVER_ID_2: Final = "ultraserverServerId2"
"""string: id of the 2-node UltraServer unit the node belongs to."""

ATTR_ULTRASERVER_SERVER_ID_4: Final = "ultraserverServerId4"
"""string: id of the 4-node UltraServer the node belongs to."""

ATTR_ULTRASERVER_NODE_ID_2: Final = "ultraserverNodeId2"
"""int: position of the node within its 2-node unit."""

ATTR_ULTRASERVER_NODE_ID_4: Final = "ultraserverNodeId4"
"""int: position of the node within its 4-node UltraServer."""

ATTR_ULTRASERVER_MODES: Final = "ultraserverModes"
"""string: supported UltraServer unit sizes joined by '_', e.g. 1_2_4."""

ATTR_NETWORK_NODE_LAYERS: Final = (
    "networkNodeLayer1",
    "networkNodeLayer2",
    "networkNodeLayer3",
    "networkNodeLayer4",
)
"""strings: the node's EC2 network nodes, top layer first, from the Node's labels
LABEL_NETWORK_NODE_LAYER_PREFIX + 1..4; each present only where its label is."""

RESOURCE_TYPE_DEVICE: Final = "neuron_device"
"""resourceType of one Neuron device."""

RESOURCE_TYPE_NODE: Final = "neuron_node"
"""resourceType of the device standing for a whole UltraServer node."""

RESOURCE_TYPE_CORE: Final = "neuron_core"
"""resourceType of one logical NeuronCore (its Neuron device's deviceId, its own coreId)."""

# --- Attributes (domain GROUP_ATTRIBUTE_DOMAIN) -----------------------------

GROUP_ATTRIBUTE_TEMPLATE: Final = "devicegroup{size}_id"
"""string: shared by exactly the devices of one allowed connected set of `size`."""

# --- Attributes (domain KUBERNETES_ATTRIBUTE_DOMAIN) ------------------------

ATTR_PCIE_ROOT: Final = "pcieRoot"
"""string: PCIe root complex of the device (`pci<domain>:<bus>`), where sysfs reveals it."""

ATTR_NUMA_NODE: Final = "numaNode"
"""int: NUMA node of the device's PCI function, where sysfs gives one (never -1)."""

# --- Capacities (short names, domain ATTRIBUTE_DOMAIN) ----------------------

CAPACITY_CORES: Final = "cores"
"""Physical NeuronCores of the device."""

CAPACITY_MEMORY: Final = "memory"
"""Device high-bandwidth memory."""

# --- Shared counters (partitionable devices) --------------------------------

COUNTER_SET_NODE: Final = "neuron-node"
"""Counter set of a node's Neuron devices: one counter per device, named after it.

A device's counter holds its logical cores (1 where cores are not published): a
core takes 1, the device all of them, the whole-node device all of every one.
"""

# --- Device taints ------------------------------------------------------------

TAINT_UNHEALTHY: Final = "neuron.aws.com/unhealthy"
"""Taint key on an unhealthy device; the value is the error kind."""

TAINT_UNWATCHED: Final = "neuron.aws.com/unwatched"
"""Informational taint key (effect None): no health file of the device can be read."""

TAINT_CORRECTED_ECC: Final = "neuron.aws.com/corrected-ecc"
"""Informational taint key (effect None): corrected ECC errors rose; the value names
the memories (`Hbm`, `Sram`, `Hbm.Sram`)."""

TAINT_HEARTBEAT_SLOW: Final = "neuron.aws.com/heartbeat-slow"
"""Informational taint key (effect None): the firmware heartbeat has stood still for
half of the time that takes the device out of service."""

# --- Node labels ------------------------------------------------------------

LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
"""Well-known node label with the EC2 instance type."""

LABEL_ULTRASERVER_MODE: Final = "neuron.amazonaws.com/ultraserver-mode"
"""Supported UltraServer unit sizes joined by '_', e.g. 1_2_4."""

LABEL_ULTRASERVER_SERVER_ID_2: Final = "neuron.amazonaws.com/ultraserver-server-id-2"
"""Id of the node's 2-node UltraServer unit (LeaderWorkerSet exclusive topology)."""

LABEL_ULTRASERVER_SERVER_ID_4: Final = "neuron.amazonaws.com/ultraserver-server-id-4"
"""Id of the node's 4-node UltraServer (LeaderWorkerSet exclusive topology)."""

LABEL_ULTRASERVER_NODE_ID_2: Final = "neuron.amazonaws.com/ultraserver-node-id-2"
"""Position of the node within its 2-node unit."""

LABEL_ULTRASERVER_NODE_ID_4: Final = "neuron.amazonaws.com/ultraserver-node-id-4"
"""Position of the node within its 4-node UltraServer."""

LABEL_NEURON_PRESENT: Final = "neuron.amazonaws.com/present"
"""`true` on a node with Neuron devices: Neuron Observer's DaemonSet selects nodes by it
(the Neuron device plugin sets it too)."""

LABEL_NETWORK_NODE_LAYER_PREFIX: Final = "topology.k8s.aws/network-node-layer-"
"""Prefix of the EC2 instance topology labels EKS puts on a Node, then the layer 1..4."""

# --- Driver process environment (names of the reference DaemonSet) ----------

ENV_NODE_NAME: Final = "NODE_NAME"
"""Name of the Node the plugin runs on; also its pool name."""

ENV_POD_UID: Final = "POD_UID"
"""UID of the plugin pod; makes socket names unique during rolling updates."""

ENV_CDI_ROOT: Final = "CDI_ROOT"
"""Directory the plugin writes CDI spec files to."""

ENV_KUBELET_REGISTRAR_DIRECTORY_PATH: Final = "KUBELET_REGISTRAR_DIRECTORY_PATH"
"""Kubelet plugin registration directory."""

ENV_KUBELET_PLUGINS_DIRECTORY_PATH: Final = "KUBELET_PLUGINS_DIRECTORY_PATH"
"""Kubelet plugins directory holding the driver's DRA socket and state."""

ENV_HEALTHCHECK_PORT: Final = "HEALTHCHECK_PORT"
"""TCP port of the gRPC health service on the pod IP, which `doctor` asks."""

ENV_HEALTHCHECK_ADDRESS: Final = "HEALTHCHECK_ADDRESS"
"""Address of the gRPC health service: the pod IP in the DaemonSet."""

ENV_PROBE_SOCKET: Final = "PROBE_SOCKET"
"""Name of the abstract unix socket the kubelet's exec probes ask, reachable only from
the plugin's own network namespace (`neuron_dra.agent.kubelet.probeclient`)."""

ENV_CHART_FULLNAME: Final = "NEURON_DRA_FULLNAME"
"""The chart's full name (`neuron-dra`, or its fullnameOverride), which names the
admission policies: `doctor` in the plugin's pod reads them by it."""

ENV_SYSFS_ROOT: Final = "SYSFS_ROOT"
"""Root directory the driver reads /sys, /dev and /opt/aws/neuron under."""

# --- Container environment (set through CDI) --------------------------------

ENV_NEURON_RT_VISIBLE_CORES: Final = "NEURON_RT_VISIBLE_CORES"
"""Host-global logical NeuronCore indices the container may use."""

ENV_NEURON_LOGICAL_NC_CONFIG: Final = "NEURON_LOGICAL_NC_CONFIG"
"""Logical NeuronCore size for the Neuron runtime (also the node config file key)."""

ENV_NEURON_RT_ULTRASERVER_MODE: Final = "NEURON_RT_ULTRASERVER_MODE"
"""UltraServer runtime mode enum (X4=1, X2H=2, X2V=3, X1=4)."""

ENV_NEURON_RT_ULTRASERVER_SERVER_ID: Final = "NEURON_RT_ULTRASERVER_SERVER_ID"
"""Id of the UltraServer unit the container's node takes part in."""

ENV_NEURON_RT_ULTRASERVER_NODE_ID: Final = "NEURON_RT_ULTRASERVER_NODE_ID"
"""Position of the container's node within that unit."""
