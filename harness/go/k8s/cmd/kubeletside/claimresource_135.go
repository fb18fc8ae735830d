//go:build k8s1.35

package main

import (
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
)

// claimResource as the kubelet fills it from 1.35, with the share ID.
func claimResource(driverName string, device state.Device, cdiDevices []*podresourcesv1.CDIDevice) *podresourcesv1.ClaimResource {
	return &podresourcesv1.ClaimResource{
		CdiDevices: cdiDevices,
		DriverName: driverName,
		PoolName:   device.PoolName,
		DeviceName: device.DeviceName,
		ShareId:    (*string)(device.ShareID),
	}
}
