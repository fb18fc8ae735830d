"""The node agent, `neuron-dra run`: one asyncio event loop per node.

Owns: kubelet registration and the DRA v1/v1beta1 and health gRPC services,
claim planning (pure), prepare/unprepare with CDI specs and the checkpoint,
the ResourceSlice publisher and its leader lock, device health, node labels,
metrics (per device, and which pod holds which device, from the kubelet's
PodResources API) and the async Kubernetes API client. May use: `resources`,
`hardware`, `api` and `consts`; never the tools or their dependencies.
"""
