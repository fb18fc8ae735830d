//go:build tools

// Keeps the promtool main package in the module graph for tests/e2e/build.py.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
