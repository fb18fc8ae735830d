//go:build !k8s1.37

// Command metadatagen needs the device metadata writer of the kubelet-plugin
// helper, which k8s.io/dynamic-resource-allocation has from 1.37 (see main.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "metadatagen: the helper's device metadata writer needs Kubernetes 1.37 or later")
	os.Exit(2)
}
