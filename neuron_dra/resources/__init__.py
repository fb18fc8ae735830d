"""What the node offers the scheduler: inventory -> ResourceSlices.

Owns: the pure slice builder (attributes, capacities, shared counters,
taints) and the resource.k8s.io/v1 validation limits. May use: `hardware`
and `consts`.
"""
