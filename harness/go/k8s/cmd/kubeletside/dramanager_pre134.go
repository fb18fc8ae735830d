//go:build !k8s1.34

package main

import (
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
)

// newDRAManager builds the 1.33 DRA manager, which logs through the global
// logger (see main's klog.SetLoggerWithOptions) rather than a given one.
func newDRAManager(_ logr.Logger, client kubernetes.Interface, rootDir, nodeName string) (draManager, error) {
	return dra.NewManagerImpl(client, rootDir, types.NodeName(nodeName))
}
