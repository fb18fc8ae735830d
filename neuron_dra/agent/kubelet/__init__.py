"""The kubelet plugin: what the kubelet talks to.

Owns: the registration socket and its service, the DRA gRPC services (v1, v1beta1)
that hand claims to a preparer, the readiness health service, and the device
health stream (`DRAResourceHealth` v1 and v1alpha1). Served before the rest of
the agent is imported, so the kubelet finds the plugin at once.
May use: `claims` (the claim reference and the per-call limits), `telemetry` (health
problems), `files`, `api`, `consts`.
"""
