"""Tools for claim authors and operators; none runs in the agent's process.

`doctor` is made to run on the node, in the plugin's pod (`kubectl exec ...
neuron-dra doctor`): it needs nothing beyond the agent's own packages, no other tool
and no tool dependency (pyproject.toml's "Doctor" contract), so it runs wherever the
agent does. The others run offline, on a workstation or from the image's `cli` extra.

Owns: CEL device selectors with Kubernetes DRA semantics, `simulate` (claims
allocated the way the scheduler does), `lint`, and topology pictures. May use
every layer below; needs the `tools` extra (`pip install -e '.[tools]'` in a clone).
"""
