//go:build !k8s1.34

package main

import (
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
)

// claimResource as the 1.33 kubelet fills it: no share ID, and the Go field
// of cdi_devices is named CDIDevices (gogo-generated code).
func claimResource(driverName string, device state.Device, cdiDevices []*podresourcesv1.CDIDevice) *podresourcesv1.ClaimResource {
	return &podresourcesv1.ClaimResource{
		CDIDevices: cdiDevices,
		DriverName: driverName,
		PoolName:   device.PoolName,
		DeviceName: device.DeviceName,
	}
}
