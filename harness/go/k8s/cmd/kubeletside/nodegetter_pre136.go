//go:build !k8s1.36

package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
)

// nodeGetter is how the DRA manager reads the Node; it takes no context
// before 1.36, so the call gets the one kubeletside runs with.
func nodeGetter(ctx context.Context, get func(context.Context) (*v1.Node, error)) dra.GetNodeFunc {
	return func() (*v1.Node, error) { return get(ctx) }
}
