//go:build tools

// Keeps the helm main package in the module graph for harness/neuron_dra_harness/build.py.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
