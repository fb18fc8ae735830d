"""The node agent, `neuron-dra run`: one asyncio event loop per node.

Rooms, each a package whose docstring says what it owns and may use, layered by
the `Agent rooms` import contract: `kubelet` (the kubelet plugin), `claims`
(claim preparation), `slices` (publishing the node), `telemetry` (health and
metrics), `apiclient` (the API server), `files`. `run` serves the kubelet's
sockets first; `firstlook` reads the node off the event loop, with a deadline;
`node`'s Agent wires the rooms and owns their lifecycle only.
May use: `resources`, `hardware`, `api` and `consts`; never the tools or their
dependencies.
"""
