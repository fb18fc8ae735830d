"""`neuron-dra doctor`: a preflight of a node and a cluster, before and after install.

Each check gives a verdict (ok, warn, fail), what it saw and, where not ok, the fix.
`nodechecks` reads the node's own files (sysfs, /dev, the kubelet's directories,
the container runtime's configuration); `plugincheck` asks the plugin's own probes
(in its pod); `clusterchecks` reads the API server
through a get function, so it is tested against a real one. `verdicts` prints
them and gives the exit status.

It runs on the node, in the plugin's pod, as much as on a workstation: so it uses the
driver's own layers (hardware, the agent's socket and probe code) and nothing of the
offline tools beside it or their dependencies, which the agent's packages do not hold.
"""
