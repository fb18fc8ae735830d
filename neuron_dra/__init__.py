"""neuron-dra: the Kubernetes DRA driver for AWS Neuron devices.

Data flows one way, and so do imports (checked by import-linter in `make test`):

    hardware   sysfs -> immutable node inventory, topology, EFA groups, fake nodes
    resources  inventory -> resource.k8s.io/v1 ResourceSlices, and their limits
    agent      `neuron-dra run`: kubelet gRPC, prepare/unprepare, CDI, checkpoint,
               slice publisher, health, metrics, the API client
    tools      offline: CEL selectors, `simulate`, `lint`, topology pictures
    cli        the `neuron-dra` command, which loads each of the above on demand

Each layer may use the ones listed above it, never one below; `api` (opaque
configs, kubelet protocol) and `consts` (published names) sit under them all.
"""
