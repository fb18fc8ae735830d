//go:build tools

// Keeps the etcd main package in the module graph for tests/e2e/build.py.
package tools

import _ "go.etcd.io/etcd/server/v3"
