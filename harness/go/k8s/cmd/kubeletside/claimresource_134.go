//go:build k8s1.34 && !k8s1.35

package main

import (
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
)

// claimResource as the 1.34 kubelet fills it: no share ID yet.
func claimResource(driverName string, device state.Device, cdiDevices []*podresourcesv1.CDIDevice) *podresourcesv1.ClaimResource {
	return &podresourcesv1.ClaimResource{
		CdiDevices: cdiDevices,
		DriverName: driverName,
		PoolName:   device.PoolName,
		DeviceName: device.DeviceName,
	}
}
