//go:build tools

// Keeps the etcd main package in the module graph for harness/neuron_dra_harness/build.py.
package tools

import _ "go.etcd.io/etcd/server/v3"
