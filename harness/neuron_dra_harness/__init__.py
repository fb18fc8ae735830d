"""The end-to-end harness: real Kubernetes components and Neuron nodes to run them on.

Owns: building the control plane, the kubelet stand-in (`kubeletside`), etcd, helm,
promtool and a real node's runtime from their Go modules (`build`, Go modules in
`harness/go/`); starting a control plane (`cluster`); simulated nodes, each a
kubelet stand-in, a fake sysfs tree and the real `neuron-dra run` (`nodes`); a
real kubelet with containerd and runc (`realnode`, `realcluster`); images; the
driver's wheel (`distribution`). Used by the tests, `scripts/demo.py` and `bench/`.
May use: the driver's packages and its dev dependencies; never the tests.
"""
