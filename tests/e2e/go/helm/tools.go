//go:build tools

// Keeps the helm main package in the module graph for tests/e2e/build.py.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
