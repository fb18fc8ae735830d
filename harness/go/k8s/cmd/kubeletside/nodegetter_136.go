//go:build k8s1.36

package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
)

// nodeGetter is how the DRA manager reads the Node; from 1.36 it passes a
// context of its own.
func nodeGetter(_ context.Context, get func(context.Context) (*v1.Node, error)) dra.GetNodeFunc {
	return get
}
