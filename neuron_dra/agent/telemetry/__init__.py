"""Health and metrics: what the node's devices say, and who holds them.

Owns: device health (sysfs health files, ECC counters, presence, the kernel log's
hardware error records and which device each names) and its poll's watchdog,
per-device series from sysfs, which pod and container hold each device (the
kubelet's PodResources API), the Node Events' bodies, the check that the host
mounts are read-only all the way down, and the Prometheus endpoint with who may
read it (TokenReview and SubjectAccessReview).
May use: `files`, `options`, `objects` (the reviews' answers decoded), `hardware`,
`api`, `consts`. It imports no API client: the reviews go through a call the agent
injects, and the agent sends the Events.
"""
