"""Publishing the node: its ResourceSlices and the Node labels the driver owns.

Owns: the slice publisher (diffs, backoff, one writer per node through a file
lock), what the API server serves (feature probes: taints, counter layouts),
the Node watch and the labels kept on it.
May use: `apiclient`, `objects` (decoded slices and Node), `telemetry` (metrics),
`files`, `resources`, `hardware`,
`consts`.
"""
