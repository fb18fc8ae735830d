//go:build k8s1.34

package main

import (
	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
)

func newDRAManager(logger logr.Logger, client kubernetes.Interface, rootDir, _ string) (draManager, error) {
	return dra.NewManager(logger, client, rootDir)
}
