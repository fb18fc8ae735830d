"""Health and metrics: what the node's devices say, and who holds them.

Owns: device health (sysfs health files, ECC counters, presence, kernel log),
per-device series from sysfs, which pod and container hold each device (the
kubelet's PodResources API), the Node Events, and the Prometheus endpoint.
May use: `files`, `hardware`, `api`, `consts`; nothing that talks to the API
server.
"""
