"""Kubernetes objects the agent reads, decoded once where they enter it.

Owns: the typed models of ResourceClaim, ResourceSlice, Node and the reviews'
answers, and their decoders from the API server's JSON.
May use: the standard library only.

One module per kind (`claim`, `node`, `slice`, `review`; `watch` for a watch
event's envelope, `envelope` for a list's page, an error Status and the server's
version): frozen, slotted
dataclasses of exactly the fields the driver reads, and a decoder from the API
server's JSON (`fields` holds the typed reads they share). Decoding
checks each field's type and names the path of a wrong one (`ObjectError`, e.g.
"status.allocation.devices.results[0].pool is int, not a string"); a field absent
or null takes its empty value, and a field the model does not name is ignored, so
an API server of a newer release that adds fields decodes as before. Past the
decoders no field of a Kubernetes object is read from a dict; a stored slice's
spec and metadata are kept as answered for the publisher's whole comparison.

Dataclasses rather than pydantic: the agent defers importing pydantic to the first
claim that carries an opaque config, and most claims carry none (the measured cost
is in docs/contributors/decisions.md). The opaque config's parameters stay raw
JSON here: `api.config` decodes them with its schema.

Not Kubernetes API objects, so not decoded here: the kubeconfig
(`apiclient.config`), the checkpoint file (`claims.checkpoint`) and CDI specs
(`claims.cdi`), each parsed by its own module. Nor are the request bodies the
driver builds itself (the desired ResourceSlices of `resources.slices`, which the
publisher compares with the decoded stored ones).
"""
