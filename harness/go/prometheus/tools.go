//go:build tools

// Keeps the promtool main package in the module graph for harness/neuron_dra_harness/build.py.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
