//go:build k8s1.37

package main

import (
	"context"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// WatchHealthStatus: the stub reports no device health. From 1.37 the
// upstream helper asks every plugin, and this is its documented way to say no.
func (s *stub) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
