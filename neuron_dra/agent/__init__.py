"""The node agent, `neuron-dra run`: an asyncio event loop that publishes, watches
and polls, and grpcio's synchronous servers whose worker threads answer the kubelet.

Each DRA call runs in one gRPC worker thread from request to answer (prepare,
unprepare: `claims.preparer` guards its state with threading locks); the event
loop owns the slice publisher, the Node watch, the health polls and the metrics
endpoint, and hands its API calls, watch streams and the reads that may hang to
threads (`apiclient.kube`, `files.offloop`, with deadlines). The
measured reasons are in docs/contributors/performance.md ("The threading model").

Rooms, each a package whose docstring says what it owns and may use, layered by
the `Agent rooms` import contract: `kubelet` (the kubelet plugin), `claims`
(claim preparation), `slices` (publishing the node), `telemetry` (health and
metrics), `apiclient` (the API server), `files`. `run` serves the kubelet's
sockets first; `firstlook` reads the node off the event loop, with a deadline;
`node`'s Agent wires the rooms and owns their lifecycle only: the preparer's
events (`claims.events`) reach the status writer and the holdings through one
queue on the loop; `gauges` reads the agent's parts at each scrape.
May use: `resources`, `hardware`, `api` and `consts`; never the tools or their
dependencies.
"""
