"""The API server: an HTTP/1.1 client of resource.k8s.io and core, without a
Kubernetes client library.

Owns: connection and credentials (kubeconfig, the pod's service account, their
rotation), calls with deadlines, watches, typed errors, retry backoff.
May use: `files`, `consts`.
"""
